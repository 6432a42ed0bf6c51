package command

import (
	"context"
	"errors"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// An upgrade in place under the fleet's step machine:
// the running image hands over its executor's session and holds
// (fleetHandover, into the upgrade state's "fleet"); the next image's
// executor adopts them (executor.Config.Adopt: no claim, the same fencing
// tokens) and agentFleet hands the runner the held slots' instances at
// once (adoptHeld), so that the runner adopts their processes, which it
// kept because Consul shows their keys held by that session
// (supervisor.Options.AdoptedSlotSession).
//
// Wiring in startAgent (fleetagent.go), with h = the fleetMember's
// adoptAgent: executor.Config{..., Adopt: h}, and a.adoptHeld(h) before
// ex.Start().

// adoptHeld gives agentFleet the instances of the holds handed over, before
// the executor starts: the agent starts them Running (no Start comes), and
// the runner, handed them with the units, adopts their processes.
func (a *agentFleet) adoptHeld(h *executor.Handover) {
	if h == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range h.Slots {
		as := &agentSlot{start: agent.Start{Slot: s.Slot(), Index: s.Index, Session: h.Session, Version: s.Version},
			exclusive: s.Exclusive, reported: true}
		if s.Volumes {
			// How the supervisor check says it.
			as.start.Volumes = "kept across an upgrade in place"
		}
		if s.Exclusive {
			as.lost, as.expired = make(chan struct{}), make(chan struct{})
		}
		a.held[s.Slot()] = as
	}
	a.poke()
}

// fleetHandover is the fleet's part of an upgrade's state under the step
// machine (nil without it), once the runner has parked the instances
// (rh: its part, whose exclusive slots' ConfirmBy it fills from the
// executor's fresh confirmation). thaw undoes it.
func (m *fleetMember) fleetHandover(ctx context.Context, rh *supervisor.Handover) (*executor.Handover, func(), error) {
	a := m.ag.Load()
	if a == nil {
		return nil, func() {}, nil
	}
	ex, ok := a.ex.(*executor.Executor)
	if !ok {
		return nil, nil, errors.New("the fleet's executor cannot hand over")
	}
	h, thaw, err := ex.Handover(ctx)
	if err != nil {
		return nil, nil, err
	}
	confirmBy(rh, h)
	return h, thaw, nil
}

// confirmBy sets, in the runner's handover, each exclusive slot's
// ConfirmBy from the executor's: its last confirmation + lock_delay/2 (the
// next image's runner kills the process then unless it confirmed the hold
// again).
func confirmBy(rh *supervisor.Handover, h *executor.Handover) {
	if rh == nil || h == nil {
		return
	}
	by := map[string]int64{}
	for _, s := range h.Slots {
		if s.Exclusive && s.Confirmed != 0 {
			by[s.Slot().String()] = s.Confirmed + int64(h.LockDelay/2)
		}
	}
	for i := range rh.Instances {
		in := &rh.Instances[i]
		if t, ok := by[in.Slot]; ok && in.Proc != nil && in.ConfirmBy == 0 {
			in.ConfirmBy = t
		}
	}
}
