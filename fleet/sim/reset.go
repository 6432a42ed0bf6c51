package sim

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// A failed slot, mariposa reset and the pause's held restarts in the
// simulator (fleet/agent/reset.go and intents.go decide them). With
// Config.Ops, an instance of a node no other fault touches fails for good
// 30 s after the loss (its supervisor gave up: agent.InstanceFailed), and
// an operator resets its slot 20 s later.
//
// Invariants:
//   - a failed slot is claimed by no node until reset: Consul applies no
//     claim of a slot while its failed mark (cluster.FailedKey) exists;
//   - the failure is carried out: by the reset, the mark is there (the
//     holder stopped the instance and released the slot as failed), and
//     the slot runs again by the end (finalCheck's full count);
//   - a failed release comes with its "fail" record in the same step;
//   - deploys paused (scope deploy or all): no rollout token is taken;
//   - a pause of scope all holds the restarts of every instance of the
//     paused units a node runs: once a node has stepped an answer of
//     control/ that shows such a pause, it has told each of them
//     (agent.HoldRestarts), and the resume lets them go.

// failAfter and resetAfter: the failure, after the loss; the reset after
// the failure.
const (
	failAfter  = 30 * time.Second
	resetAfter = 20 * time.Second
)

type simFail struct {
	slot agent.SlotID
	node *node
	at   time.Duration
}

// failInstance: n's instance of some slot fails for good.
func (s *Sim) failInstance(n *node) {
	if !n.alive || !n.up || n.agent == nil {
		return
	}
	ids := sortedSlots(n.inst)
	held := n.agent.Held()
	var running []agent.SlotID
	for _, id := range ids {
		// Running as its agent knows (not on its way out already, which
		// the agent would rightly ignore).
		// (Not the unit that reschedules: its failures move, resched.go.)
		if n.inst[id].running && held[id] == agent.Running && !s.byU[id.Unit].Reschedule {
			running = append(running, id)
		}
	}
	if len(running) == 0 {
		if alt := s.otherToFail(n); alt != nil {
			s.failInstance(alt)
		}
		return
	}
	id := running[s.rng.IntN(len(running))]
	s.ops.fail = &simFail{slot: id, node: n, at: s.now}
	s.note("operator: %s's instance of %s fails for good", n.name, id)
	s.step(n, agent.InstanceFailed{Slot: id, Reason: "restarts exhausted (simulated)"})
	s.at(resetAfter, s.resetSlot)
}

// resetSlot: mariposa reset of the failed slot.
func (s *Sim) resetSlot() {
	f := s.ops.fail
	if f == nil {
		return
	}
	key := cluster.FailedKey(f.slot.Unit, f.slot.K)
	e, _, _ := s.store.Get(key, true)
	if e == nil {
		s.violate("slot %s failed on %s %v ago and is not marked failed", f.slot, f.node.name, s.now-f.at)
		return
	}
	s.res.Ops.Resets++
	s.control(fmt.Sprintf("reset %s", f.slot), api.KVTxnOps{{Verb: api.KVDeleteCAS, Key: key, Index: e.ModifyIndex}})
}

// deploysPaused: unit's deploys are paused now (Consul's control/).
func (s *Sim) deploysPaused(unit string) bool {
	if s.ops == nil || !s.ops.on {
		return false
	}
	_, ok := s.controlView().Paused(unit, cluster.PauseDeploy)
	return ok
}

// failOpsFor: a failed slot's release also sets its mark.
func failOpsFor(a agent.Release) api.KVTxnOps {
	if a.Failed == nil {
		return nil
	}
	return api.KVTxnOps{{Verb: api.KVSet, Key: cluster.FailedKey(a.Slot.Unit, a.Slot.K), Value: a.Failed.Encode()}}
}

// claimOfFailed, when Consul applied a claim of id: its failed mark must
// not exist.
func (s *Sim) claimOfFailed(n *node, id agent.SlotID) {
	if e, _, _ := s.store.Get(cluster.FailedKey(id.Unit, id.K), true); e != nil {
		s.violate("failed slot %s claimed by %s before mariposa reset", id, n.name)
	}
}

// checkQueue holds a step's actions of the failures and the pause's
// holds against what the node knew (called by checkDecisions).
func (s *Sim) checkQueue(n *node, no *nodeOps, in any, acts []any, recorded func(string, agent.SlotID, bool) bool) {
	for _, a := range acts {
		switch a := a.(type) {
		case agent.Release:
			if a.Failed != nil && !recorded("fail", a.Slot, false) {
				s.violate("audit: %s releases failed slot %s without a fail record", n.name, a.Slot)
			}
		case agent.Start, agent.Stop:
			// A new instance is told afresh.
			slot := agent.SlotID{}
			if st, ok := a.(agent.Start); ok {
				slot = st.Slot
			} else {
				slot = a.(agent.Stop).Slot
			}
			delete(no.told, slot)
		case agent.TakeToken:
			if no.ctl != nil {
				if _, paused := no.ctl.Paused(a.Slot.Unit, cluster.PauseDeploy); paused {
					s.violate("deploys paused: %s takes rollout token %d for %s with control/ at %d showing the pause", n.name, a.T, a.Slot, no.ctl.Index)
				}
			}
		case agent.HoldRestarts:
			if no.told == nil {
				no.told = map[agent.SlotID]string{}
			}
			if a.Why == "" {
				delete(no.told, a.Slot)
			} else {
				no.told[a.Slot] = a.Why
			}
		}
	}
	c, ok := in.(agent.ControlAnswer)
	if !ok || n.agent == nil {
		return
	}
	for id, ph := range n.agent.Held() {
		if ph != agent.Running {
			continue
		}
		r, paused := c.View.Paused(id.Unit, cluster.PauseAll)
		all := paused && r.Scope == cluster.PauseAll
		switch {
		case all && no.told[id] == "":
			s.violate("paused (scope all): %s's instance of %s was not told to hold its restarts", n.name, id)
		case !all && no.told[id] != "":
			s.violate("resumed: %s's instance of %s still holds its restarts", n.name, id)
		}
	}
}

// actQueue carries out the queue's actions; false: not one.
func (s *Sim) actQueue(n *node, a any) bool {
	switch a := a.(type) {
	case agent.HoldRestarts:
		s.note("%s restarts of %s held: %q", n.name, a.Slot, a.Why)
	case agent.PublishIntents:
		s.rpc(n, func() any {
			op := &api.KVTxnOp{Verb: api.KVDelete, Key: cluster.IntentsKey(n.name)}
			if len(a.List) > 0 {
				b, _ := json.Marshal(a.List)
				op = &api.KVTxnOp{Verb: api.KVSet, Key: cluster.IntentsKey(n.name), Value: b}
			}
			r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{op})
			s.countTxn(r, err)
			return agent.IntentsPublished{List: a.List, OK: err == nil && r.OK}
		}, func() any { return agent.IntentsPublished{List: a.List} })
	default:
		return false
	}
	return true
}
