package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Drain (issue 13): mariposa drain NODE writes control/drain/<node>, which
// every node follows with its existing control/ watch. Every node then
// ranks the draining node out of placement (FilterDraining), and the
// draining node gives its slots away one at a time:
//
//   - a non-exclusive slot is released while its instance keeps running,
//     as an orphan; another node claims the slot and starts its instance,
//     and the old instance stops once the new one passes its checks in
//     Consul (or after handoffTimeout): the service never drops below
//     count, and runs one instance more during each handoff;
//   - an exclusive slot cannot run twice: its instance stops, then the slot
//     is released, and the next handoff waits until the new holder's
//     instance passes.
//
// A slot no other node can take now (none feasible: every other node is
// down, draining, ineligible or fails the unit's constraints) is not given
// away: its instance keeps running here and the slot stays held, so the
// service stays at its count; the drain moves it as soon as a node can
// take it. Past the drain's deadline, whatever is left is given up at once,
// but for those slots: they stay unless the drain was forced (-force). The
// node stays out of placement until mariposa drain -undo deletes the key.

// DrainPrefix is control/drain/: one key per draining node.
const DrainPrefix = ControlPrefix + "drain/"

// handoffTimeout bounds how long an old instance waits for its successor
// to pass before it stops anyway (a successor that never passes must not
// keep the drain from moving on forever).
const handoffTimeout = 2 * time.Minute

// DrainRecord is control/drain/<node>.
type DrainRecord struct {
	Node     string    `json:"node"`
	Deadline time.Time `json:"deadline"`
	// Force: past the deadline, give up even the slots no other node can
	// take (the service runs below its count).
	Force bool      `json:"force,omitempty"`
	Actor string    `json:"actor"`
	At    time.Time `json:"at"`
}

// StartDrain marks node draining until deadline, with its record; force
// gives up, past the deadline, the slots no other node can take.
func StartDrain(client *api.Client, node string, within time.Duration, force bool, by string) (DrainRecord, error) {
	if within <= 0 {
		return DrainRecord{}, errors.New("the deadline must be positive")
	}
	now := time.Now().UTC()
	r := DrainRecord{Node: node, Deadline: now.Add(within), Force: force, Actor: by, At: now}
	b, _ := json.Marshal(r)
	ok, _, _, err := client.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: DrainPrefix + node, Value: b}},
		AuditOp(AuditEvent{At: now, Node: node, Actor: by, Action: "drain", Reason: "deadline " + r.Deadline.Format(time.RFC3339)}),
	}, nil)
	if err != nil {
		return DrainRecord{}, err
	}
	if !ok {
		return DrainRecord{}, errors.New("the drain was not written; run it again")
	}
	return r, nil
}

// UndoDrain lets node take slots again; false when it was not draining.
func UndoDrain(client *api.Client, node, by string) (bool, error) {
	p, _, err := client.KV().Get(DrainPrefix+node, &api.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil {
		return false, err
	}
	now := time.Now().UTC()
	ok, _, _, err := client.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: p.Key, Index: p.ModifyIndex}},
		AuditOp(AuditEvent{At: now, Node: node, Actor: by, Action: "drain-undo"}),
	}, nil)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, errors.New("the drain changed while it was being undone; run it again")
	}
	return true, nil
}

// HeldBy lists the slots node holds ("<unit>/<k>"), sorted.
func HeldBy(client *api.Client, node string, q *api.QueryOptions) ([]string, uint64, error) {
	pairs, meta, err := client.KV().List(SlotsPrefix, q)
	if err != nil {
		return nil, 0, err
	}
	var out []string
	for unit, ks := range parseSlots(pairs, func(string, string, error) {}) {
		for k, s := range ks {
			if s.session != "" && s.value.Node == node {
				out = append(out, slotName(unit, k))
			}
		}
	}
	sort.Strings(out)
	return out, meta.LastIndex, nil
}

func parseDrains(pairs api.KVPairs, report func(key, msg string, err error)) map[string]DrainRecord {
	out := map[string]DrainRecord{}
	for _, p := range pairs {
		node, ok := strings.CutPrefix(p.Key, DrainPrefix)
		if !ok {
			continue
		}
		var r DrainRecord
		if err := json.Unmarshal(p.Value, &r); err != nil {
			// Still a drain: the node is kept out of placement, and gives its
			// slots up at once (no deadline to wait for).
			report(p.Key, "a corrupt drain record; the node drains at once (mariposa drain -undo deletes it)", err)
			r = DrainRecord{Node: node}
		}
		out[node] = r
	}
	return out
}

// drainStepLocked picks the next slot this draining node gives away, or
// none while a handoff is under way; every slot at once past the
// deadline. Orphans keep their instance running until the successor
// passes; stops give the slot up once the instance stopped.
func (f *Fleet) drainStepLocked(now time.Time) (orphans, stops []string) {
	d, draining := f.drains[f.cfg.Node]
	if !draining {
		f.drainStuck = nil
		return nil, nil
	}
	past := !now.Before(d.Deadline)
	if !past {
		for _, ho := range f.handoffs {
			if !ho.passed {
				return nil, nil // one handoff at a time
			}
		}
	}
	ids := make([]string, 0, len(f.held))
	for id := range f.held {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	stuck := map[string]bool{}
	for _, id := range ids {
		h := f.held[id]
		if f.handoffs[id] != nil || h.orphan {
			continue
		}
		if !(past && d.Force) && !f.movableLocked(h.unit, h.k, now) {
			stuck[id] = true
			if !f.drainStuck[id] {
				f.log.Warn("drain: no other node can take the slot; its instance keeps running here", "slot", id)
			}
			continue
		}
		if h.unit.exclusive() || past {
			stops = append(stops, id)
		} else {
			orphans = append(orphans, id)
		}
		if !past {
			break
		}
	}
	f.drainStuck = stuck
	return orphans, stops
}

// movableLocked: a node other than this one may take slot k of u now, as
// this node sees the fleet (draining nodes, this one included, out of
// placement).
func (f *Fleet) movableLocked(u UnitSpec, k int, now time.Time) bool {
	name := u.Unit.Name
	v := viewOf(name, markDraining(withServices(f.nodes, f.svcNodes), f.drains), f.slots, f.unitsLocked(), f.penalty[name])
	for _, h := range f.held {
		if h.unit.Unit.Name == name {
			v.Holders[h.k] = f.cfg.Node
		}
	}
	delete(v.Holders, k)
	for _, r := range Rank(u.Unit, k, v, now) {
		if r.Verdict.OK && r.Node != f.cfg.Node {
			return true
		}
	}
	return false
}

// handoff is a drained slot's passage to its next holder.
type handoff struct {
	since  time.Time
	passed bool // the successor's instances pass in Consul (or it timed out)
}

// awaitSuccessor waits until every member of u runs in slot k on another
// node with passing checks (at most handoffTimeout), then wakes the fleet.
func (f *Fleet) awaitSuccessor(ctx context.Context, u UnitSpec, k int, ho *handoff) {
	id := slotName(u.Unit.Name, k)
	tctx, cancel := context.WithTimeout(ctx, handoffTimeout)
	defer cancel()
	defer f.wake()
	done := func() {
		f.mu.Lock()
		ho.passed = true
		f.mu.Unlock()
	}
	for _, svc := range u.Services {
		want := fmt.Sprintf("%s-%d", svc.Name, k)
		var index uint64
		for {
			entries, meta, err := f.cfg.Client.Health().Service(svc.Name, "", true,
				(&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(tctx))
			if tctx.Err() != nil {
				if ctx.Err() == nil {
					f.log.Warn("drain: the slot's new instance did not pass in time; going on", "slot", id)
					done()
				}
				return
			}
			if err != nil {
				select {
				case <-tctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			found := false
			for _, e := range entries {
				if e.Service.ID == want && e.Node.Node != f.cfg.Node {
					found = true
				}
			}
			if found {
				break
			}
			if meta.LastIndex < index {
				index = 0
			} else {
				index = meta.LastIndex
			}
		}
	}
	done()
	f.log.Info("drain: the slot's new instance passes", "slot", id)
}

// markDraining: nodes with their drains.
func markDraining(nodes []NodeInfo, drains map[string]DrainRecord) []NodeInfo {
	if len(drains) == 0 {
		return nodes
	}
	out := make([]NodeInfo, len(nodes))
	for i, n := range nodes {
		if _, ok := drains[n.Name]; ok {
			n.Draining = true
		}
		out[i] = n
	}
	return out
}

// Stuck lists the slots node holds that no other node may take now, as
// this state shows the fleet, each with why ("n2: not live ...; n3:
// draining"): a drain keeps them there, running, until a node can take
// them (or, forced, gives them up at its deadline).
func (st *State) Stuck(node string, now time.Time) map[string]string {
	out := map[string]string{}
	for unit, ks := range st.Slots {
		u, ok := st.Units[unit]
		if !ok {
			continue
		}
		for k, s := range ks {
			if s.Session == "" || s.Value.Node != node {
				continue
			}
			v := st.View(unit)
			delete(v.Holders, k)
			var why []string
			movable := false
			for _, r := range Rank(u.Unit, k, v, now) {
				if r.Node == node {
					continue
				}
				if r.Verdict.OK {
					movable = true
					break
				}
				why = append(why, r.Node+": "+oneLine(r.Verdict.Reason))
			}
			if movable {
				continue
			}
			if len(why) == 0 {
				why = []string{"no other node runs mariposa -cluster"}
			}
			out[slotName(unit, k)] = strings.Join(why, "; ")
		}
	}
	return out
}
