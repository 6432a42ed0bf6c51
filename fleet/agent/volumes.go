package agent

import (
	"strings"
	"time"
)

// Volumes in the step machine (website/stateful.md, CLUSTER.md section 8):
// the data of a slot whose unit has volumes that move with it (Unit.Volumes,
// handoff = "snapshot") follows the slot from holder to holder.
//
//	old holder                               new holder
//	instance exited (slot still held)
//	PushHandoff: snapshot, then one
//	transaction fenced by the hold
//	(check-session, check-index on the
//	slot key) sets handoffs/<unit>/<k>
//	HandoffDone
//	Release ─────────────────────────────>  Claim ... ClaimDone
//	                                         Restore: read handoffs/<unit>/<k>,
//	serve the snapshot               <────   fetch it (or keep, or on_missing)
//	                                         RestoreDone
//	                                         Start
//
// What the agent decides is when: a claimed slot's instance starts only
// once its Restore has answered OK for this term (phase Restoring between
// the claim and the Start), and a slot given up gracefully is released only
// once its handoff has been published or has failed (phase HandingOff
// between the instance's exit and the Release). Which copy of the data a
// new holder starts from is decided where the data is, by the executor
// (and the simulator) with cluster.ChooseData (cluster/volumes.go): by
// generation (the fencing index of the term that wrote it),
// never by who handed off last; a handoff whose lock_index is one less
// than the new term's is the newest data there is; without one,
// on_missing decides. The keys and the codec are cluster's (HandoffKey,
// Handoff).
//
// A holder whose restore failed never ran its instance: its handoff
// (Ready false) forwards the one it was to restore instead of publishing
// its own older or empty data, and the node does not claim the slot again
// for RestoreBackoff (a short penalty: another node may reach the data's
// source); with on_missing = "fail" and no data
// to restore (RestoreDone.Missing), the slot fails instead, its release
// carrying its failed mark (reset.go) until mariposa reset. A hold lost (watchdog, session, taken)
// publishes nothing: it cannot, the transaction is fenced by the hold.

// RestoreBackoff: after its restore failed, a node does not claim the slot
// again for this long.
const RestoreBackoff = 10 * time.Second

// HandoffRetry: a handoff that got no answer is sent again this long
// after.
const HandoffRetry = 500 * time.Millisecond

// The phases of volumes (doc.go's diagram).
const (
	// Restoring: claimed, the slot's data being readied (Restore sent);
	// no instance yet.
	Restoring Phase = Updating + 1
	// HandingOff: the instance has exited, the handoff is being published
	// (PushHandoff sent); the slot is still held.
	HandingOff Phase = Updating + 2
)

// Inputs and actions of volumes.
type (
	// Restore: ready the slot's volumes for the term whose fencing token
	// is Index, held by Session, before its instance starts (answer:
	// RestoreDone). Prev is the slot's previous holder as this node saw
	// it in the unit's index ("" unknown): cluster.ChooseData's PrevNode
	// and the restore record's From.
	Restore struct {
		Slot    SlotID
		Index   uint64
		Session string
		Prev    string
	}
	// RestoreDone answers Restore. Missing: the data could not be handed
	// off and on_missing = "fail": the slot fails (its failed mark, as an
	// instance that failed for good, reset.go, until mariposa reset);
	// any other failure: the slot is not claimed again by this node for
	// RestoreBackoff. Note says what was done.
	RestoreDone struct {
		Slot    SlotID
		Index   uint64
		OK      bool
		Missing bool
		Note    string
	}
	// PushHandoff: publish the slot's handoff before its release, its
	// instance stopped: a snapshot of the volumes at generation Index
	// (Ready), or, when they were never ready here (its restore failed),
	// the handoff it was to restore passed on (answer: HandoffDone).
	PushHandoff struct {
		Slot    SlotID
		Index   uint64
		Session string
		Ready   bool
	}
	// HandoffDone answers PushHandoff. Not OK: with GiveUp (Consul
	// refused it: the hold is not this session's; or the snapshot
	// failed), the slot is released without it and the next holder
	// applies on_missing; without (no answer, no
	// leader), the handoff is sent again HandoffRetry later: the release
	// waits for it, the data is still only here.
	HandoffDone struct {
		Slot   SlotID
		OK     bool
		GiveUp bool
		Note   string
	}
	// PushCopies: push a copy of the running slot's volumes that have
	// replicas to that many other nodes and record them (the periodic
	// copies a new holder restores from after an unplanned loss, with
	// on_missing = "latest"), fenced by the hold of the term whose
	// fencing token is Index (answer: CopiesDone).
	PushCopies struct {
		Slot    SlotID
		Index   uint64
		Session string
	}
	// CopiesDone answers PushCopies; not OK: no copy was recorded (Note
	// says why): the next one is due at the next interval all the same.
	CopiesDone struct {
		Slot  SlotID
		Index uint64
		OK    bool
		Note  string
	}
)

// noInstance: a hold in this phase has no instance to stop (lose and
// loseSession drop it).
func (p Phase) noInstance() bool {
	return p == Claiming || p == Releasing || p == Restoring || p == HandingOff
}

// claimed: the claim of id came back (its token set, phase Starting):
// the instance starts, after its restore when the unit has volumes.
func (a *Agent) claimed(now time.Time, id SlotID, h *held, out []any) []any {
	if a.rec(id.Unit).unit.Volumes {
		h.volumes = true
		h.phase = Restoring
		out = append(out, Restore{Slot: id, Index: h.index, Session: a.session, Prev: h.prev})
		if !a.cfg.Faults.StartBeforeRestore {
			return out
		}
	}
	return append(out, Start{Slot: id, Index: h.index, Session: a.session, Version: a.startVersion(id, now)})
}

// exited: the instance of a hold being stopped has exited: the slot is
// released, after its handoff when the unit has volumes.
func (a *Agent) exited(now time.Time, id SlotID, h *held, out []any) []any {
	// The unit may be gone (removed, or the node stopping: no units):
	// what it was when claimed decides.
	if (h.volumes || a.rec(id.Unit).unit.Volumes) && !a.cfg.Faults.ReleaseBeforeHandoff {
		h.phase = HandingOff
		return append(out, PushHandoff{Slot: id, Index: h.index, Session: a.session, Ready: h.volReady})
	}
	h.phase = Releasing
	return a.release(now, id, out)
}

// stepVolumes takes RestoreDone and HandoffDone.
func (a *Agent) stepVolumes(now time.Time, in any, out []any) []any {
	switch in := in.(type) {
	case RestoreDone:
		h := a.held[in.Slot]
		if h == nil || h.phase != Restoring || h.index != in.Index || h.lost {
			// A restore of an earlier term, or of a hold given up since.
			return out
		}
		if in.OK {
			h.volReady = true
			h.phase = Starting
			out = append(out, Record{Slot: in.Slot, Action: "restore", Reason: in.Note})
			return append(out, Start{Slot: in.Slot, Index: h.index, Session: a.session, Version: a.startVersion(in.Slot, now), Volumes: in.Note})
		}
		if in.Missing {
			// on_missing = "fail": the slot fails (reset.go's failed
			// release: its mark, until mariposa reset), the handoff it
			// was to restore passed on first.
			why := in.Note
			if !strings.HasPrefix(why, "volume data missing") {
				why = "volume data missing: " + why
			}
			if a.rs.fails == nil {
				a.rs.fails = map[SlotID]*failing{}
			}
			a.rs.fails[in.Slot] = &failing{reason: why, since: now, unit: a.rec(in.Slot.Unit).unit}
			h.phase = HandingOff
			return append(out, PushHandoff{Slot: in.Slot, Index: h.index, Session: a.session, Ready: false})
		}
		// Never ran here: pass the handoff on, release, and leave the
		// slot to another node for a while.
		why := "volumes not ready: " + in.Note
		if a.volBackoff == nil {
			a.volBackoff = map[SlotID]time.Time{}
		}
		a.volBackoff[in.Slot] = now.Add(RestoreBackoff)
		h.phase = HandingOff
		return append(out, h.then(Record{Slot: in.Slot, Action: "reschedule", Reason: why}),
			PushHandoff{Slot: in.Slot, Index: h.index, Session: a.session, Ready: false})
	case HandoffDone:
		h := a.held[in.Slot]
		if h == nil || h.phase != HandingOff {
			return out
		}
		if !in.OK && !in.GiveUp {
			if a.volRetry == nil {
				a.volRetry = map[SlotID]volRetry{}
			}
			a.volRetry[in.Slot] = volRetry{at: now.Add(HandoffRetry), h: h}
			return out
		}
		// What the handoff did goes in the release's record (handedOff,
		// records.go).
		if h.release.Action != "" {
			h.release.Reason = handedOff(h.release.Reason, in)
		} else if !in.OK || in.Note != "" {
			h.release = Record{Slot: in.Slot, Action: "release", Reason: handedOff("released", in)}
		}
		h.phase = Releasing
		return a.release(now, in.Slot, out)
	case CopiesDone:
		h := a.held[in.Slot]
		if h == nil || h.index != in.Index || !h.copying {
			return out
		}
		h.copying = false
		if every := a.rec(in.Slot.Unit).unit.CopyEvery; every > 0 {
			h.copyAt = now.Add(every)
		}
	}
	return out
}

// volRetry is a handoff to send again at at, for the hold h (dropped if
// the slot is no longer held so).
type volRetry struct {
	at time.Time
	h  *held
}

// reconcileVolumes sends again the handoffs whose time came (a node has
// none but while Consul does not answer), and the periodic copies due.
func (a *Agent) reconcileVolumes(now time.Time, out []any, at func(time.Time)) []any {
	if a.copies {
		out = a.reconcileCopies(now, out, at)
	}
	if len(a.volRetry) == 0 {
		return out
	}
	ids := make([]SlotID, 0, len(a.volRetry))
	for id := range a.volRetry {
		ids = append(ids, id)
	}
	ids = sortSlots(ids)
	for _, id := range ids {
		r := a.volRetry[id]
		h := a.held[id]
		if h != r.h || h.phase != HandingOff || a.session == "" {
			delete(a.volRetry, id)
			continue
		}
		if now.Before(r.at) {
			at(r.at)
			continue
		}
		delete(a.volRetry, id)
		out = append(out, PushHandoff{Slot: id, Index: h.index, Session: a.session, Ready: h.volReady})
	}
	return out
}

// volHeldOff: this node does not claim id before the time returned (its
// restore failed there); ok false: it may.
func (a *Agent) volHeldOff(id SlotID, now time.Time) (time.Time, bool) {
	t, ok := a.volBackoff[id]
	if !ok {
		return time.Time{}, false
	}
	if !now.Before(t) {
		delete(a.volBackoff, id)
		return time.Time{}, false
	}
	return t, true
}

// reconcileCopies: the periodic copies, decided here and pushed by the
// executor (PushCopies). A hold whose instance runs (phase running, not lost or
// orphaned) of a unit with CopyEvery pushes a copy CopyEvery after its
// instance started (or after it was adopted, or its unit gained
// replicas), then CopyEvery after each answer, one at a time. A hold
// stopping, handing off or gone pushes none: its handoff carries the data
// as its term ended.
func (a *Agent) reconcileCopies(now time.Time, out []any, at func(time.Time)) []any {
	if a.session == "" {
		return out
	}
	for _, id := range a.heldIDs() {
		h := a.held[id]
		every := a.rec(id.Unit).unit.CopyEvery
		if every <= 0 || h.phase != Running || h.lost || h.orphan {
			h.copyAt = time.Time{}
			continue
		}
		if h.copying {
			continue
		}
		if h.copyAt.IsZero() {
			h.copyAt = now.Add(every)
		}
		if now.Before(h.copyAt) {
			at(h.copyAt)
			continue
		}
		h.copying = true
		out = append(out, PushCopies{Slot: id, Index: h.index, Session: a.session})
	}
	return out
}
