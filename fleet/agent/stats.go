package agent

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// What the agent tells operators, read from its state only (no Consul):
// Stats for the metrics (cluster.FleetStats; cluster/stats.go says each
// field's meaning) and Waiting for the liveness check's output. Both only
// read; fleet/executor calls them
// from its loop and publishes the result.

// Stats is a snapshot of what this node last heard and holds: Ready once
// the nodes, control/ (with
// Config.Control) and every unit's slots have been heard (the caller
// knows whether the units were told); LiveNodes the fleet's live members (passing their check);
// a slot held by this node (its hold not lost: Mine, its fencing token),
// held by another, failed (its failed mark, with Config.Control), lost
// (freed without a release: its holder's session invalidated; counted
// free too) or free; VacantSince when this node first saw a free slot
// it plans a claim for; Deployments one per operator's deployment
// ("<name>/<n>" in the units' records); Pauses and HeldBack (the
// intents of the node's queue) with Config.Control.
func (a *Agent) Stats(now time.Time) cluster.FleetStats {
	st := cluster.FleetStats{Node: a.cfg.Node, Ready: a.nodes != nil}
	if a.nodes != nil {
		st.LiveNodes = len(a.nodes.Nodes)
	}
	var ctl *ControlView
	if a.cfg.Control {
		ctl = a.ops.ctl
		st.Ready = st.Ready && ctl != nil
	}
	if ctl != nil {
		st.StormBrake = ctl.Storm != nil
		for _, p := range ctl.Pauses {
			st.Pauses = append(st.Pauses, p)
		}
		sort.Slice(st.Pauses, func(i, j int) bool { return st.Pauses[i].Unit < st.Pauses[j].Unit })
		st.HeldBack = a.heldBackCount()
	}
	names := make([]string, 0, len(a.units))
	for n := range a.units {
		names = append(names, n)
	}
	sort.Strings(names)
	deps := map[string]cluster.DeploymentStats{}
	for _, name := range names {
		u := a.units[name]
		v := a.slots[name]
		if v == nil {
			st.Ready = false
		}
		r := a.recs[name]
		us := cluster.UnitStats{Unit: name, Desired: u.Count}
		for k := range u.Count {
			id := SlotID{name, k}
			ss := cluster.SlotStats{K: k, State: cluster.SlotStatFree}
			var sl Slot
			if v != nil {
				sl = v.slot(k)
				ss.Node = sl.Node
			}
			h := a.held[id]
			failed := false
			if ctl != nil {
				_, failed = ctl.Failed[id.String()]
			}
			switch {
			case h != nil && !h.lost && !h.orphan && h.phase != Claiming:
				ss.State, ss.Mine, ss.Node, ss.TermIndex = cluster.SlotStatHeld, true, a.cfg.Node, h.index
			case sl.Node != "":
				ss.State = cluster.SlotStatHeld
			case failed:
				ss.State = cluster.SlotStatFailed
			case v != nil && !sl.Released && (sl.ModifyIndex > 0 || (r != nil && r.invalidated[k] != "")):
				ss.State, ss.Node = cluster.SlotStatLost, a.ops.lostFrom[id]
			}
			if r != nil && (ss.State == cluster.SlotStatFree || ss.State == cluster.SlotStatLost) {
				if vac, ok := r.vacant[k]; ok {
					ss.VacantSince = vac.since
				}
			}
			switch ss.State {
			case cluster.SlotStatHeld:
				us.Held++
			case cluster.SlotStatFree:
				us.Free++
			case cluster.SlotStatLost:
				us.Free++
				us.Lost++
			default:
				us.Failed++
			}
			us.Slots = append(us.Slots, ss)
		}
		st.Units = append(st.Units, us)
		if a.dep != nil {
			if dv := a.dep.views[name]; dv != nil && dv.Record != nil {
				if d, ok := deploymentOf(dv.Record); ok {
					if prev, seen := deps[d.Name]; !seen || d.N > prev.N || (d.N == prev.N && d.Status == cluster.DeployRunning) {
						deps[d.Name] = d
					}
				}
			}
		}
	}
	for _, d := range deps {
		st.Deployments = append(st.Deployments, d)
	}
	sort.Slice(st.Deployments, func(i, j int) bool { return st.Deployments[i].Name < st.Deployments[j].Name })
	return st
}

// deploymentOf is the operator's deployment a unit's record belongs to
// (its Spec, "<name>/<n>"), with the record's status; false: written
// otherwise.
func deploymentOf(r *Deployment) (cluster.DeploymentStats, bool) {
	var name string
	var n uint64
	if r.Spec == "" {
		return cluster.DeploymentStats{}, false
	}
	for i := len(r.Spec) - 1; i >= 0; i-- {
		if r.Spec[i] == '/' {
			name = r.Spec[:i]
			if _, err := fmt.Sscan(r.Spec[i+1:], &n); err != nil {
				return cluster.DeploymentStats{}, false
			}
			break
		}
	}
	if name == "" {
		return cluster.DeploymentStats{}, false
	}
	status := r.Status
	if status == "" {
		status = cluster.DeployUnknown
	}
	return cluster.DeploymentStats{Name: name, N: n, Status: status}, true
}

// Waiting says, one line per free slot this node is placed for and does
// not hold (as its last ranking placed it), when it claims it or why it
// does not: "slot api/2 free; rank 2, claiming in 400ms". Empty: it
// waits for none.
func (a *Agent) Waiting(now time.Time) []string {
	names := make([]string, 0, len(a.units))
	for n := range a.units {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	for _, name := range names {
		u, v, r := a.units[name], a.slots[name], a.recs[name]
		if v == nil || r == nil || !r.hasAsg {
			continue
		}
		ks := make([]int, 0, len(r.asg.mine))
		for k := range r.asg.mine {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		for _, k := range ks {
			id := SlotID{name, k}
			if k >= u.Count || v.holder(k) != "" || a.held[id] != nil {
				continue
			}
			me := r.asg.mine[k]
			sl := v.slot(k)
			what := id.String() + " free"
			if from := a.ops.lostFrom[id]; from != "" && !sl.Released {
				what = id.String() + " lost with " + from
			}
			line := fmt.Sprintf("slot %s; rank %d", what, me.Rank+1)
			vac, seen := r.vacant[k]
			switch hb, held := a.ops.held[id]; {
			case held:
				line += ", held back: " + hb.why
			case a.refused[id] >= v.Index && a.refused[id] != 0:
				line += ", its claim was refused: waits for a newer view of the slots"
			case a.volBackoff[id].After(now):
				line += fmt.Sprintf(", its volumes failed here: not before %s", a.volBackoff[id].Sub(now).Round(time.Millisecond))
			case !seen:
				line += ", not looked at yet"
			default:
				d, first := placement.ClaimDelay(me.Rank, a.cfg.Step, vac.jitter)
				if !first {
					d, _ = placement.SecondRoundDelay(me.HRWRank, a.cfg.Step, vac.jitter)
				}
				when := vac.since.Add(d)
				why := ""
				if !sl.Released && (sl.ModifyIndex > 0 || r.invalidated[k] != "") {
					when, why = when.Add(a.cfg.LockDelay), ", after the lock delay"
				}
				when = maxTime(when, vac.notBefore)
				if w, delayed := a.afterReschedule(when, vac, sl, d); delayed {
					when, why = w, why+", after the reschedule delay"
				}
				if now.Before(when) {
					line += fmt.Sprintf("%s, claiming in %s", why, when.Sub(now).Round(time.Millisecond))
				} else {
					line += ", claim due"
				}
			}
			out = append(out, line)
		}
	}
	return out
}

// heldBackCount is how many intents the node's queue lists now (intents'
// count, without its bookkeeping).
func (a *Agent) heldBackCount() int {
	n := 0
	for _, hb := range a.ops.held {
		if hb.kind == holdPause {
			n++
		}
	}
	for id := range a.pq.updates {
		h := a.held[id]
		if _, paused := a.ops.ctl.Paused(id.Unit, cluster.PauseDeploy); paused && h != nil && h.phase == Running {
			n++
		}
	}
	for _, f := range a.rs.fails {
		if f.held {
			n++
		}
	}
	if a.ops.ctl != nil && len(a.ops.ctl.Pauses) > 0 {
		for _, m := range a.pq.restarts {
			n += len(m)
		}
	}
	return n
}

// VacantSince is when this node first saw slot id free (false: it has no
// vacancy of it), for the claim delay: read as a Claim of it is sent.
func (a *Agent) VacantSince(id SlotID) (time.Time, bool) {
	r := a.recs[id.Unit]
	if r == nil {
		return time.Time{}, false
	}
	v, ok := r.vacant[id.K]
	return v.since, ok
}
