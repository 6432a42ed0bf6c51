package cluster

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// Drain (issue 13): mariposa drain NODE writes control/drain/<node>, which
// every node follows with its existing control/ watch (the step machine
// decides the moves: fleet/agent/ops.go). Every node then
// ranks the draining node out of placement (FilterDraining), and the
// draining node gives its slots away one at a time:
//
//   - a non-exclusive slot is released while its instance keeps running,
//     as an orphan; another node claims the slot and starts its instance,
//     and the old instance stops once the new one passes its checks in
//     Consul (or after a timeout): the service never drops below
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

// markDraining: nodes with their drains.
func markDraining(nodes []placement.NodeInfo, drains map[string]DrainRecord) []placement.NodeInfo {
	if len(drains) == 0 {
		return nodes
	}
	out := make([]placement.NodeInfo, len(nodes))
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
			for _, r := range placement.Rank(u.Unit, k, v, now) {
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

// oneLine folds a verdict's reason onto one line (as placement.Explain
// does).
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
