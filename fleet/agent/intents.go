package agent

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
)

// The pause's held restarts and the node's queue in the step machine
// (CLUSTER.md section 6; cluster/localpause.go's FollowPauses decides the
// same for a node outside the fleet, with pause.go's pauseFuncOf):
//
//   - A pause of scope "all" (of the fleet, or of a unit) also holds the
//     automatic restarts of the unit's instances: a crashed child stays
//     down until the resume. The agent tells the node's instances which
//     held slots are paused and why (HoldRestarts, on every change: the
//     pause, the resume, a drop, a new hold under a pause), and which of
//     their held restarts the operator dropped (mariposa queue drop: the
//     instance stays down, failed).
//   - While deploys are paused (scope deploy or all), a held slot does
//     not move to its deployment's new version: no rollout token is
//     taken (updateHeld); an update under
//     way goes on; a failed deployment is failed, not reverted
//     (revertHeld).
//   - While anything is paused, the node lists what it holds back in its
//     queue (cluster.IntentsKey, what mariposa queue reads): the restarts
//     its instances report held (RestartHeld), the claims held back by the
//     pause ("claim"), the updates ("update"), the failed slots whose
//     release waits for the resume ("reschedule"), each with cluster.IntentID's id, the time first
//     seen, and who dropped it. The key is written when the list changes
//     (PublishIntents) and deleted once it is empty; a write that fails is
//     tried again a second later.

// Inputs of the queue.
type (
	// RestartHeld: the node's instances hold a restart of the slot's
	// Target (the service, as "<service>@<unit>/<k>", mariposa queue's
	// target) back for the pause; Detail what it would do ("" no longer
	// held).
	RestartHeld struct {
		Slot   SlotID
		Target string
		Detail string
	}
	// IntentsPublished answers PublishIntents.
	IntentsPublished struct {
		List []cluster.Intent
		OK   bool
	}
)

// Actions of the queue.
type (
	// HoldRestarts tells the node's instances whether the slot's automatic
	// restarts wait for a resume: Why the pause ("" they go on again);
	// Dropped the targets whose held restart the operator dropped (by
	// whom): they stay down.
	HoldRestarts struct {
		Slot    SlotID
		Why     string
		Dropped map[string]string
	}
	// PublishIntents writes the node's queue (an empty List deletes the
	// key; answer: IntentsPublished).
	PublishIntents struct{ List []cluster.Intent }
)

type told struct {
	why     string
	dropped map[string]string
}

type pauseQueue struct {
	told     map[SlotID]told
	restarts map[SlotID]map[string]string // slot -> target -> detail
	since    map[string]time.Time         // intent id -> first seen
	updates  map[SlotID]string            // updates held back: "to <version>"
	// written: the queue as last written (nil: no key); publishing: a
	// write on its way; retry: not before.
	written    []cluster.Intent
	publishing bool
	retry      time.Time
}

func (q *pauseQueue) init() {
	if q.told == nil {
		q.told, q.restarts, q.since = map[SlotID]told{}, map[SlotID]map[string]string{}, map[string]time.Time{}
		q.updates = map[SlotID]string{}
	}
}

// stepQueue takes the queue's inputs.
func (a *Agent) stepQueue(now time.Time, in any, out []any) []any {
	a.pq.init()
	switch in := in.(type) {
	case RestartHeld:
		m := a.pq.restarts[in.Slot]
		if in.Detail == "" {
			delete(m, in.Target)
			if len(m) == 0 {
				delete(a.pq.restarts, in.Slot)
			}
			break
		}
		if m == nil {
			m = map[string]string{}
			a.pq.restarts[in.Slot] = m
		}
		m[in.Target] = in.Detail
	case IntentsPublished:
		a.pq.publishing = false
		if in.OK {
			a.pq.written = in.List
			if len(in.List) == 0 {
				a.pq.written = nil
			}
		} else {
			a.pq.retry = now.Add(time.Second)
		}
	}
	return out
}

// restartsPaused: the automatic restarts of unit's instances wait (a pause
// of scope all), and why.
func (a *Agent) restartsPaused(unit string) (string, bool) {
	if a.ops.ctl == nil || a.cfg.Faults.NoRestartHold {
		return "", false
	}
	r, ok := a.ops.ctl.Paused(unit, cluster.PauseAll)
	if !ok || r.Scope != cluster.PauseAll {
		return "", false
	}
	return r.Why(), true
}

// reconcileQueue tells the instances what changed in their pause.
func (a *Agent) reconcileQueue(out []any) []any {
	a.pq.init()
	ctl := a.ops.ctl
	// The instances: every held slot whose pause changed (nothing to look
	// at while nothing is paused and no instance was told it is).
	var ids []SlotID
	if len(ctl.Pauses) > 0 || len(a.pq.told) > 0 {
		ids = a.heldIDs()
	}
	for _, id := range ids {
		h := a.held[id]
		if h.phase == Claiming || h.phase == Restoring || h.phase == Releasing || h.lost {
			// No instance (none before its volumes are ready), or one on
			// its way out: the next one is told afresh (simulator -ops
			// seeds 206 and 282: told while restoring, its instance started
			// unheld).
			delete(a.pq.told, id)
			continue
		}
		var t told
		if why, ok := a.restartsPaused(id.Unit); ok {
			t.why = why
			for target := range a.pq.restarts[id] {
				if d, ok := ctl.Drops[cluster.IntentID(a.cfg.Node, "restart", target)]; ok {
					if t.dropped == nil {
						t.dropped = map[string]string{}
					}
					t.dropped[target] = d.By
				}
			}
		}
		old, had := a.pq.told[id]
		if had == (t.why != "") && old.why == t.why && maps.Equal(old.dropped, t.dropped) {
			continue
		}
		if t.why == "" {
			delete(a.pq.told, id)
			if !had {
				continue
			}
		} else {
			a.pq.told[id] = t
		}
		out = append(out, HoldRestarts{Slot: id, Why: t.why, Dropped: t.dropped})
	}
	for id := range a.pq.told {
		if a.held[id] == nil {
			delete(a.pq.told, id)
		}
	}
	for id := range a.pq.restarts {
		if a.held[id] == nil {
			delete(a.pq.restarts, id)
		}
	}
	return out
}

// publishQueue tells the instances what changed in their pause, and
// publishes the queue when it changed: only while something is paused, or
// to delete it. Called at the end of a step, once the claims held back in
// it are known.
func (a *Agent) publishQueue(now time.Time, out []any, at func(time.Time)) []any {
	ctl := a.ops.ctl
	if !a.cfg.Control || ctl == nil {
		return out
	}
	// The instances first: with or without a session (an orphan runs on).
	out = a.reconcileQueue(out)
	if len(ctl.Pauses) == 0 && a.pq.written == nil {
		clear(a.pq.since)
		return out
	}
	list := a.intents(now)
	if slices.EqualFunc(list, a.pq.written, func(x, y cluster.Intent) bool { return x == y }) || a.pq.publishing {
		return out
	}
	if now.Before(a.pq.retry) {
		at(a.pq.retry)
		return out
	}
	a.pq.publishing = true
	return append(out, PublishIntents{List: list}, Record{Action: "queue", Reason: queueWhy(list)})
}

func queueWhy(list []cluster.Intent) string {
	if len(list) == 0 {
		return "nothing held back"
	}
	return "holds back " + itoa(len(list))
}

func itoa(n int) string {
	if n == 1 {
		return "1 action"
	}
	return strconv.Itoa(n) + " actions"
}

// updateHeld: moving held slot id to target waits while deploys are
// paused (scope deploy or all: no rollout token is taken), recorded once
// and listed in the queue ("update").
func (a *Agent) updateHeld(id SlotID, target string, out []any) (bool, []any) {
	if !a.cfg.Control || a.ops.ctl == nil || a.cfg.Faults.IgnorePause {
		return false, out
	}
	a.pq.init()
	r, paused := a.ops.ctl.Paused(id.Unit, cluster.PauseDeploy)
	if !paused {
		delete(a.pq.updates, id)
		return false, out
	}
	what := "to " + target
	if a.pq.updates[id] != what {
		a.pq.updates[id] = what
		out = append(out, Record{Slot: id, Action: "hold", Reason: "the update " + what + " waits for the resume (" + r.Why() + ")"})
	}
	return true, out
}

// revertHeld: while deploys of unit are paused, a failed deployment is
// not reverted (cluster/pause.go: scope deploy means no auto_revert).
func (a *Agent) revertHeld(unit string) bool {
	if !a.cfg.Control || a.ops.ctl == nil || a.cfg.Faults.IgnorePause {
		return false
	}
	_, paused := a.ops.ctl.Paused(unit, cluster.PauseDeploy)
	return paused
}

// intents lists what this node holds back now, in order.
func (a *Agent) intents(now time.Time) []cluster.Intent {
	var out []cluster.Intent
	for id, hb := range a.ops.held {
		if hb.kind == holdPause {
			// The node's place, "rank 1 of 3" (claimRank; the pause
			// is the queue's reason to exist).
			out = append(out, cluster.Intent{Kind: "claim", Target: id.String(), Detail: hb.rank.String()})
		}
	}
	for id, what := range a.pq.updates {
		h := a.held[id]
		if _, paused := a.ops.ctl.Paused(id.Unit, cluster.PauseDeploy); !paused || h == nil || h.phase != Running {
			delete(a.pq.updates, id)
			continue
		}
		out = append(out, cluster.Intent{Kind: "update", Target: id.String(), Detail: what})
	}
	for id, f := range a.rs.fails {
		if f.held {
			out = append(out, cluster.Intent{Kind: "reschedule", Target: id.String(), Detail: f.reason})
		}
	}
	if a.ops.ctl != nil && len(a.ops.ctl.Pauses) > 0 {
		for _, m := range a.pq.restarts {
			for target, detail := range m {
				out = append(out, cluster.Intent{Kind: "restart", Target: target, Detail: detail})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Target < out[j].Target
	})
	seen := make(map[string]bool, len(out))
	for i := range out {
		in := &out[i]
		in.Node = a.cfg.Node
		in.ID = cluster.IntentID(a.cfg.Node, in.Kind, in.Target)
		seen[in.ID] = true
		if _, ok := a.pq.since[in.ID]; !ok {
			a.pq.since[in.ID] = now
		}
		in.Since = a.pq.since[in.ID]
		if a.ops.ctl != nil {
			if d, ok := a.ops.ctl.Drops[in.ID]; ok {
				in.Dropped = d.By
			}
		}
	}
	for id := range a.pq.since {
		if !seen[id] {
			delete(a.pq.since, id)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
