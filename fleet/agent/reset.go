package agent

import (
	"slices"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// A failed slot and mariposa reset in the step machine (CLUSTER.md
// section 3, "Reschedules"; mariposa reset's write is executor.ResetSlot):
//
//   - The node's supervisor gave up on a slot's instance (its restarts
//     exhausted; a member of a group failed for good): InstanceFailed.
//     The holder stops what is left of the instance and releases the slot
//     as failed: the release's transaction sets the slot's failed mark
//     (cluster.FailedKey, under control/, so every node hears it with its
//     ControlAnswer) with its audit record ("fail"). While placement is
//     paused, the release waits for the resume (the node's queue shows
//     it as a "reschedule").
//   - No node claims a slot its control/ answer shows failed (held back,
//     recorded once, "hold"), and every claim's transaction checks the
//     mark is absent (Claim.CheckFailed): a node whose answer of control/
//     is older than the fail's release (it heard the release's vacancy
//     first) is refused (ClaimDone.Failed) and waits for a newer answer.
//   - mariposa reset UNIT/K deletes the mark, check-index on it, with its
//     audit record ("reset"), in one transaction (fleet/executor's
//     ResetSlot). The answer of control/ without the mark lifts the hold:
//     the vacancy starts again then, so the ranks stay apart, and the
//     best-ranked node claims the slot.
//
// Without Config.Control (no watch on control/) nothing holds a failed
// slot back: it is released with its mark and claimed again.
//
// A unit with restart.on_exhausted = "reschedule" moves the slot instead,
// until its history exhausts reschedule.attempts (reschedule.go).

// InstanceFailed: the node's supervisor gave up on the slot's instance
// (its restarts exhausted, or a member of its group failed for good).
// Service: the service that failed (a group's member; "" unknown).
// History: the slot's reschedule history as Consul has it
// (RescheduleHistoryKey), read when the failure came: only the slot's
// holder writes it, and this node holds the slot.
type InstanceFailed struct {
	Slot    SlotID
	Service string
	Reason  string
	History []placement.RescheduleEvent
}

// holdFailed: a claim held back because the slot failed.
const holdFailed = holdBudget + 1

type failing struct {
	reason string
	since  time.Time
	held   bool // waiting for a pause's resume (an intent of the queue)
	// resched: the unit reschedules (reschedule.go), with the slot's
	// history and the unit as it was.
	resched bool
	history []placement.RescheduleEvent
	unit    Unit
}

type resetState struct {
	fails map[SlotID]*failing
	// stepAside: the slots this node rescheduled, to the end of its
	// penalty (reschedule.go).
	stepAside map[SlotID]time.Time
}

// stepFail takes InstanceFailed.
func (a *Agent) stepFail(now time.Time, in InstanceFailed, out []any) []any {
	h := a.held[in.Slot]
	if h == nil || h.lost || h.orphan || h.phase == Claiming || h.phase == Stopping || h.phase == Releasing {
		return out // on its way out already
	}
	if a.rs.fails == nil {
		a.rs.fails = map[SlotID]*failing{}
	}
	if a.rs.fails[in.Slot] != nil {
		return out
	}
	u := a.rec(in.Slot.Unit).unit
	if cur, ok := a.units[in.Slot.Unit]; ok {
		u = cur
	}
	a.rs.fails[in.Slot] = &failing{reason: failReason(u, in), since: now, resched: u.Reschedule, history: in.History, unit: u}
	return a.failNow(in.Slot, out)
}

// failNow stops a failed slot's instance (its release follows its exit,
// as failed), unless placement is paused: then it waits, as an intent.
func (a *Agent) failNow(id SlotID, out []any) []any {
	f, h := a.rs.fails[id], a.held[id]
	if f == nil || h == nil {
		return out
	}
	if a.cfg.Control && a.ops.ctl != nil && !a.cfg.Faults.IgnorePause {
		if r, paused := a.ops.ctl.Paused(id.Unit, cluster.PausePlacement); paused {
			if !f.held {
				f.held = true
				out = append(out, Record{Slot: id, Action: "hold", Reason: "the failed slot's release waits for the resume (" + r.Why() + ")"})
			}
			return out
		}
	}
	f.held = false
	if h.phase == Stopping || h.phase == Releasing || h.lost || h.orphan {
		return out
	}
	h.phase = Stopping
	return append(out, Stop{Slot: id})
}

// release is the Release of a slot whose instance exited while stopping:
// a failed slot's carries its mark and its record.
func (a *Agent) release(now time.Time, id SlotID, out []any) []any {
	f := a.rs.fails[id]
	if f == nil {
		r := Release{Slot: id, Session: a.session}
		if h := a.held[id]; h != nil {
			r.Audit = h.release
		}
		return append(out, r)
	}
	delete(a.rs.fails, id)
	if f.resched {
		return a.rescheduleRelease(now, id, f, out)
	}
	why := f.reason + "; mariposa reset " + id.String() + " clears it"
	return append(out, Release{Slot: id, Session: a.session, Failed: &cluster.FailedRecord{Node: a.cfg.Node, Reason: f.reason, At: now}},
		Record{Slot: id, Action: "fail", Reason: why})
}

// reconcileFails, after an answer of control/: the failures held back by
// a pause that is lifted go on; those whose hold ended are forgotten.
func (a *Agent) reconcileFails(out []any) []any {
	if len(a.rs.fails) == 0 {
		return out
	}
	ids := make([]SlotID, 0, len(a.rs.fails))
	for id := range a.rs.fails {
		ids = append(ids, id)
	}
	sortSlots(ids)
	for _, id := range ids {
		if h := a.held[id]; h == nil || h.lost || h.orphan {
			delete(a.rs.fails, id)
			continue
		}
		if a.rs.fails[id].held {
			out = a.failNow(id, out)
		}
	}
	return out
}

// failedIn: slot id is failed as control/ says.
func (a *Agent) failedIn(ctl *ControlView, id SlotID) (cluster.FailedRecord, bool) {
	if ctl == nil || a.cfg.Faults.IgnoreFailed {
		return cluster.FailedRecord{}, false
	}
	r, ok := ctl.Failed[id.String()]
	return r, ok
}

// FailedOp is the index, in a claim's transaction of n ops, of its
// check that the slot's failed mark is absent (Claim.CheckFailed): the
// last op before the takeover budget's CAS. -1: none.
func (c Claim) FailedOp(n int) int {
	if !c.CheckFailed {
		return -1
	}
	if c.Takeover != nil && c.Takeover.Logged {
		return n - 2
	}
	return n - 1
}

// FailedRefusal: a claim's transaction of n ops was refused by its
// failed-mark check alone.
func (c Claim) FailedRefusal(n int, failed []int) bool {
	i := c.FailedOp(n)
	return i >= 0 && len(failed) > 0 && !slices.ContainsFunc(failed, func(f int) bool { return f != i })
}
