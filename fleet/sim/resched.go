package sim

import (
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// Reschedules in the simulator (fleet/agent/reschedule.go decides them).
// With Config.Ops the last unit says restart.on_exhausted = "reschedule"
// (attempts 1 within an hour, penalty 10 min): 33 s after the loss the
// instance of one of its slots on a spare node fails for good (the slot
// moves), and 7 s later that slot's instance on its new holder fails too,
// when that node is spare as well: two failures exhaust the history, the
// slot fails, and an operator resets it 6 s later. Every node hears
// penalty/ (agent.PenaltiesAnswer) a watch's travel after a reschedule's
// release is applied.
//
// Invariants:
//   - a reschedule's release comes with its "reschedule" record in the
//     same step; its history is Consul's with this failure appended, and
//     is within the unit's attempts (placement.NextDelay over it: an
//     exhausted history must fail the slot);
//   - Consul applies no claim of a rescheduled slot by the node penalized
//     for it while its penalty runs and another node could hold the slot
//     (up, reachable, not draining, not penalized, holding none of the
//     unit's slots: max_per_node is 1).
//   - Consul applies no claim of a rescheduled slot before its delay ends
//     (the failure plus placement.NextDelay's delay over the history the
//     release wrote; one second for the first failure here).

const (
	reschedAfter  = 33 * time.Second
	reschedAgain  = 7 * time.Second
	reschedReset  = 6 * time.Second
	reschedWindow = time.Hour
)

type simResched struct {
	unit  string
	spare map[*node]bool
	// pen: per slot, the node penalized for it and until when (wall).
	pen map[agent.SlotID]simPenalty
	// penalties: what penalty/ holds, as the watch answers it.
	penalties map[string]map[string]time.Time
	slot      agent.SlotID
	failed    bool // the second failure failed the slot
	// after: per slot released by a reschedule Consul applied, the end of
	// its delay, until its next claim.
	after map[agent.SlotID]time.Time
}

type simPenalty struct {
	node  string
	until time.Time
}

// reschedPolicy is the rescheduling unit's.
func reschedPolicy() schema.Reschedule {
	return schema.Reschedule{Attempts: 1, Interval: reschedWindow, Delay: time.Second, MaxDelay: time.Minute, Penalty: 10 * time.Minute}
}

// reschedSetup makes the last unit reschedule (Config.Ops).
func (s *Sim) reschedSetup() {
	if !s.cfg.Ops || len(s.units) == 0 {
		return
	}
	i := len(s.units) - 1
	u := s.units[i]
	u.Reschedule = true
	p := schema.Placement{}
	if u.Placement != nil {
		p = *u.Placement
	}
	p.Reschedule = reschedPolicy()
	u.Placement = &p
	s.units[i] = u
	s.byU[u.Name] = u
	s.rs = &simResched{unit: u.Name, pen: map[agent.SlotID]simPenalty{}, after: map[agent.SlotID]time.Time{}}
}

// reschedFaults schedules the failures on spare nodes.
func (s *Sim) reschedFaults(spare []*node) {
	if s.rs == nil {
		return
	}
	s.rs.spare = map[*node]bool{}
	for _, n := range spare {
		s.rs.spare[n] = true
	}
	s.at(s.cfg.LossAt+reschedAfter, func() {
		for _, n := range spare {
			if id, ok := s.runningOf(n, s.rs.unit); ok {
				s.rs.slot = id
				s.failFor(n, id)
				s.at(reschedAgain, s.failAgain)
				return
			}
		}
	})
}

// runningOf: a slot of unit n runs, as its agent knows.
func (s *Sim) runningOf(n *node, unit string) (agent.SlotID, bool) {
	if !n.alive || !n.up || n.agent == nil {
		return agent.SlotID{}, false
	}
	held := n.agent.Held()
	for _, id := range sortedSlots(n.inst) {
		if id.Unit == unit && n.inst[id].running && held[id] == agent.Running {
			return id, true
		}
	}
	return agent.SlotID{}, false
}

// failFor: n's instance of id fails for good, with the slot's history as
// Consul has it (the executor's read).
func (s *Sim) failFor(n *node, id agent.SlotID) {
	var hist []placement.RescheduleEvent
	if e, _, _ := s.store.Get(id.RescheduleHistoryKey(), true); e != nil {
		hist = agent.ParseRescheduleHistory(e.Value)
	}
	s.note("operator: %s's instance of %s fails for good (reschedules)", n.name, id)
	s.step(n, agent.InstanceFailed{Slot: id, Service: id.Unit, Reason: "restarts exhausted (simulated)", History: hist})
}

// failAgain: the slot's new holder's instance fails too, if that node is
// spare; the slot then fails, and is reset.
func (s *Sim) failAgain() {
	id := s.rs.slot
	for _, n := range s.nodes {
		if !s.rs.spare[n] {
			continue
		}
		if got, ok := s.runningOf(n, id.Unit); ok && got == id {
			s.failFor(n, id)
			s.at(reschedReset, s.reschedResetSlot)
			return
		}
	}
}

// reschedResetSlot: mariposa reset of the slot, if it failed (the
// history cleared with the mark, as executor.ResetSlot).
func (s *Sim) reschedResetSlot() {
	id := s.rs.slot
	e, _, _ := s.store.Get(cluster.FailedKey(id.Unit, id.K), true)
	if e == nil {
		return
	}
	s.rs.failed = true
	s.res.Ops.RescheduleFails++
	s.control("reset "+id.String()+" (rescheduled)", api.KVTxnOps{{Verb: api.KVDeleteCAS, Key: cluster.FailedKey(id.Unit, id.K), Index: e.ModifyIndex},
		{Verb: api.KVDelete, Key: id.RescheduleHistoryKey()}})
}

// rescheduleOpsFor: a reschedule's release also writes the penalty and
// the history (fleet/executor's rescheduleOps).
func rescheduleOpsFor(node string, a agent.Release) api.KVTxnOps {
	r := a.Reschedule
	if r == nil {
		return nil
	}
	ops := api.KVTxnOps{
		{Verb: api.KVSet, Key: cluster.PenaltyKey(a.Slot.Unit, node), Value: r.EncodePenalty()},
		{Verb: api.KVSet, Key: a.Slot.RescheduleHistoryKey(), Value: r.EncodeHistory()},
	}
	if !r.After.IsZero() && a.Failed == nil {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: a.Slot.DelayKey(r.After)},
			&api.KVTxnOp{Verb: api.KVSet, Key: a.Slot.DelayGuardKey(), Value: []byte(r.After.UTC().Format(time.RFC3339Nano))})
	}
	return ops
}

// delayOps are a claim's operations for the reschedule delay
// (fleet/executor's delayOps): the marks its view showed and the guard
// deleted, or, with none, the guard's check-not-exists. NoDelayGuard (a
// mutation): nothing.
func (s *Sim) delayOps(a agent.Claim) api.KVTxnOps {
	if s.cfg.ExecFaults.NoDelayGuard {
		return nil
	}
	if len(a.Delays) == 0 {
		return api.KVTxnOps{{Verb: api.KVCheckNotExists, Key: a.Slot.DelayGuardKey()}}
	}
	ops := api.KVTxnOps{{Verb: api.KVDelete, Key: a.Slot.DelayGuardKey()}}
	for _, k := range a.Delays {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: k})
	}
	return ops
}

// rescheduleApplied: Consul applied n's reschedule release a: the nodes
// hear penalty/ a watch's travel later.
func (s *Sim) rescheduleApplied(n *node, a agent.Release) {
	if s.rs == nil || a.Reschedule == nil {
		return
	}
	if a.Failed == nil {
		s.res.Ops.Rescheduled++
		// The delay the history gives, computed here, not read from
		// the release (whose After is what is checked).
		if d, _ := placement.NextDelay(reschedPolicy(), a.Reschedule.History, s.wall()); d > 0 {
			last := a.Reschedule.History[len(a.Reschedule.History)-1]
			s.rs.after[a.Slot] = last.At.Add(d)
		}
	}
	s.rs.pen[a.Slot] = simPenalty{node: n.name, until: a.Reschedule.Until}
	pen := make(map[string]map[string]time.Time, len(s.rs.penalties)+1)
	for u, m := range s.rs.penalties {
		pen[u] = m
	}
	m := map[string]time.Time{}
	for k, v := range pen[a.Slot.Unit] {
		m[k] = v
	}
	m[n.name] = a.Reschedule.Until
	pen[a.Slot.Unit] = m
	s.rs.penalties = pen
	for _, o := range s.nodes {
		o := o
		gen := o.gen
		// The watch on penalty/ answers within its pace (asked again
		// no sooner than watchEvery after its last answer), and travels:
		// it may trail the vacancy's.
		s.at(s.latency()+time.Duration(s.rng.Int64N(int64(watchEvery))), func() {
			if o.gen == gen && o.reachable() {
				s.step(o, agent.PenaltiesAnswer{Penalties: pen})
			}
		})
	}
}

// checkReschedule holds a reschedule's release against Consul's history
// (in checkDecisions' step).
func (s *Sim) checkReschedule(n *node, a agent.Release, recorded func(string, agent.SlotID, bool) bool) {
	r := a.Reschedule
	if r == nil {
		return
	}
	if a.Failed == nil && !recorded("reschedule", a.Slot, false) {
		s.violate("audit: %s reschedules %s without a reschedule record", n.name, a.Slot)
	}
	var hist []placement.RescheduleEvent
	if e, _, _ := s.store.Get(a.Slot.RescheduleHistoryKey(), true); e != nil {
		hist = agent.ParseRescheduleHistory(e.Value)
	}
	if len(r.History) != len(hist)+1 || r.History[len(r.History)-1].Node != n.name {
		s.violate("%s reschedules %s with history %+v; Consul has %+v", n.name, a.Slot, r.History, hist)
		return
	}
	if _, exhausted := placement.NextDelay(reschedPolicy(), r.History, s.wall()); exhausted && a.Failed == nil {
		s.violate("%s reschedules %s beyond its attempts (%d failures within %v): the slot must fail", n.name, a.Slot, len(r.History), reschedWindow)
	}
}

// claimOfRescheduled, when Consul applied n's claim of id: not the node
// penalized for it while another could hold it.
func (s *Sim) claimOfRescheduled(n *node, id agent.SlotID) {
	if s.rs == nil {
		return
	}
	if after, ok := s.rs.after[id]; ok {
		delete(s.rs.after, id)
		if s.wall().Before(after) {
			s.violate("rescheduled slot %s claimed by %s %v before its reschedule delay ends", id, n.name, after.Sub(s.wall()))
		}
	}
	p, ok := s.rs.pen[id]
	if !ok || p.node != n.name || !s.wall().Before(p.until) {
		return
	}
	holders := map[string]bool{}
	keys, _, _ := s.store.Keys(agent.IndexPrefix(id.Unit), true)
	for _, k := range keys {
		if _, node, ok := cutHeld(k, agent.IndexPrefix(id.Unit)); ok {
			holders[node] = true
		}
	}
	for _, o := range s.nodes {
		if o == n || !o.reachable() || holders[o.name] {
			continue
		}
		if s.drained(o) {
			continue
		}
		if q := s.rs.penalties[id.Unit][o.name]; q.After(s.wall()) {
			continue
		}
		if s.plc != nil && s.plc.allows(s.byU[id.Unit], o, id.K) != "" {
			continue // its placement excludes o
		}
		s.violate("rescheduled slot %s claimed again by %s within its penalty (until %v), while %s could hold it", id, n.name, p.until.Sub(s.wall()), o.name)
		return
	}
}

// cutHeld splits an index entry <prefix><k>/<node>.
func cutHeld(key, prefix string) (k, node string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return "", "", false
	}
	k, node, ok = strings.Cut(rest, "/")
	return k, node, ok && node != ""
}

// otherToFail: when n runs only the rescheduling unit's instances,
// another spare node that runs one of another unit (reset.go's failure
// then happens there), in the nodes' order; nil none.
func (s *Sim) otherToFail(n *node) *node {
	if s.rs == nil {
		return nil
	}
	for _, o := range s.nodes {
		if o == n || !s.rs.spare[o] || !o.alive || !o.up || o.agent == nil {
			continue
		}
		held := o.agent.Held()
		for id, in := range o.inst {
			if in.running && held[id] == agent.Running && !s.byU[id.Unit].Reschedule {
				return o
			}
		}
	}
	return nil
}
