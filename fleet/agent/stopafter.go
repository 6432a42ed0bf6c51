package agent

import (
	"fmt"
	"time"
)

// A slot lost with its node (CLUSTER.md section 3): the three rules that
// follow an invalidation.
//
//   - node_lost_after (reschedule block): another node takes over a slot
//     freed by an invalidation only that long after it saw the slot free,
//     so that a rebooting node can come back to it; the node that held it
//     claims it back at once (lostWait).
//   - stop_after (a non-exclusive unit): a holder whose session has not
//     been renewed for TTL/2 + stop_after (cut off from Consul) stops its
//     instance, and another node takes over such a slot only after
//     stop_after + TTL/2 + the longest stop + 1 s, so that the two never
//     run at once (stopDue, lostWait).
//   - an orphan (a non-exclusive hold whose session was lost, its
//     instance running) is claimed again at once with the new session
//     when the index shows its slot free: its instance goes on, the same
//     process (reclaimOrphan). It stops when another node holds the slot,
//     or at its stop_after.
//
// And the record of the loss: the sessions have behavior delete, so that
// an invalidation removes the index entries with the locks in one Raft
// write; the slot key goes with them. Its claimed key (cluster.ClaimedKey,
// set by every claim, never locked) still names the holder: status reads
// the slot as lost with that node (cluster.ReadState). Nothing is written
// for it.

// lostWait is how long after a vacancy is seen a node other than the lost
// holder from waits, beyond the rank's delay, to take over a slot of u
// freed by an invalidation (at least the lock delay).
func (a *Agent) lostWait(u Unit, from string) time.Duration {
	wait := a.cfg.LockDelay
	if from == a.cfg.Node {
		return wait
	}
	if p := u.Placement; p != nil {
		wait = max(wait, p.Reschedule.NodeLostAfter)
		if !u.Exclusive && p.StopAfter > 0 && a.cfg.TTL > 0 {
			// A cut-off holder decides to stop at most TTL/2 plus
			// stop_after after its last renewal, and its stop takes up
			// to the unit's longest; a second more for scheduling.
			wait = max(wait, p.StopAfter+a.cfg.TTL/2+u.MaxStop+time.Second)
		}
	}
	return wait
}

// stopDue is when a non-exclusive hold of u must stop its instance for its
// stop_after, its session last renewed at renewed; false: never.
func (a *Agent) stopDue(u Unit, renewed time.Time) (time.Time, bool) {
	p := u.Placement
	if u.Exclusive || p == nil || p.StopAfter <= 0 || a.cfg.TTL <= 0 || renewed.IsZero() {
		return time.Time{}, false
	}
	return renewed.Add(a.cfg.TTL/2 + p.StopAfter), true
}

// cutOffReason is the record's reason of a stop for stop_after.
func cutOffReason(u Unit) string {
	return fmt.Sprintf("cut off from Consul for longer than stop_after (%s)", u.Placement.StopAfter)
}

// lastHolder is who held slot id of r's unit last as this node knows:
// itself for a slot it lost (ownLost), or the holder its views showed
// before the invalidation; "" unknown.
func (a *Agent) lastHolder(r *unitRec, id SlotID) string {
	if a.ownLost[id] {
		return a.cfg.Node
	}
	return r.invalidated[id.K]
}

// noteLostOwn notes slot id as lost with this node's hold (lastHolder:
// this node claims it back at once), unless the unit's view already shows
// another node holding it: that node's loss is then the one a vacancy
// follows, and node_lost_after applies to it. (A node that saw its slot
// taken, then lost it, and then saw the taker's session invalidated
// claimed it at the lock delay, as its own: e2e
// TestFleetSpreadNodeLostDNS, one CI run.)
func (a *Agent) noteLostOwn(id SlotID) {
	if v := a.slots[id.Unit]; v != nil {
		if n := v.holder(id.K); n != "" && n != a.cfg.Node {
			return
		}
	}
	a.ownLost[id] = true
}

// noteOwnLost forgets the lost slots of v's unit that v shows released or
// held by another node.
func (a *Agent) noteOwnLost(v *SlotsView) {
	for id := range a.ownLost {
		if id.Unit != v.Unit {
			continue
		}
		if s := v.slot(id.K); s.Released || s.Node != "" && s.Node != a.cfg.Node {
			delete(a.ownLost, id)
		}
	}
}

// reclaimOrphan: h, this node's orphan of id (its session lost, its
// instance running), is claimed again with the new session now that the
// view shows the slot free; no rank, no wait (the node was its holder),
// and no takeover of the budget's.
func (a *Agent) reclaimOrphan(now time.Time, u Unit, v *SlotsView, id SlotID, h *held, out []any) []any {
	if !h.cut || h.reclaim || h.unclaiming || h.phase == Stopping || h.lost {
		return out
	}
	if idx, ok := a.refused[id]; ok {
		if idx >= v.Index {
			return out // refused on this view: a newer one first
		}
		delete(a.refused, id)
	}
	if now.Before(h.retry) {
		if t, ok := a.waitAt[id.Unit]; !ok || h.retry.Before(t) {
			a.setWait(a.rec(id.Unit), id.Unit, h.retry)
		}
		return out
	}
	if a.cfg.Control {
		a.ops.init()
		a.ops.lostFrom[id] = a.cfg.Node // it was this node's
	}
	_, _, may, out := a.gateClaim(now, u, v, id.K, 0, claimRank{0, 1}, out) // its own: first of one
	if !may {
		return out
	}
	h.reclaim, h.sent = true, now
	a.heldChanged()
	return append(out, Claim{Slot: id, Session: a.session, Node: a.cfg.Node, From: a.cfg.Node, CheckFailed: a.cfg.Control},
		Record{Slot: id, Action: "claim", Reason: "claimed back: lost with this node's session", From: a.cfg.Node})
}

// orphanStray: an orphan whose claim back got no answer, and a view newer
// than that answer shows the slot this node's: the claim was applied, the
// hold unknown; it is released (the instance runs on), and claimed back
// again once the slot shows free.
func (a *Agent) orphanStray(id SlotID, h *held, view *SlotsView, out []any) []any {
	if h.unsure == 0 || h.unclaiming || h.reclaim || view == nil || view.Index <= h.unsure || view.slot(id.K).Node != a.cfg.Node || a.session == "" {
		return out
	}
	h.unclaiming = true
	return append(out, Release{Slot: id, Session: a.session}, Record{Slot: id, Action: "release", Reason: "stray"})
}

// reclaimDone takes the answer of an orphan's claim: held again, its
// instance running on under the new term; refused or unanswered, it stays
// an orphan (a claim applied whose answer was lost is then held by the
// session unknown to the agent: the slot shows held by this node, so no
// other claims it, and the orphan runs on until its stop_after or the
// session's loss).
func (a *Agent) reclaimDone(now time.Time, in ClaimDone, h *held, out []any) []any {
	h.reclaim = false
	a.heldChanged()
	if !in.OK {
		if in.Taken {
			if v := a.slots[in.Slot.Unit]; v != nil {
				a.refused[in.Slot] = v.Index
			}
			out = append(out, Refresh{Units: []string{in.Slot.Unit}})
		}
		if !in.Taken {
			// Refused for the lock delay, or no answer: not again for a
			// tenth of the lock delay (as a claim's).
			h.retry = now.Add(a.cfg.LockDelay / 10)
		}
		if in.Lost {
			// Perhaps applied: a newer view that shows it this node's
			// finds the stray (orphanStray).
			h.unsure = 1
			if v := a.slots[in.Slot.Unit]; v != nil {
				h.unsure = v.Index
			}
		}
		a.markDirty(in.Slot.Unit)
		return out
	}
	delete(a.ownLost, in.Slot)
	h.orphan, h.cut, h.unsure = false, false, 0
	h.index, h.confirmed, h.acked, h.seen = in.Index, h.sent, now, nil
	if a.dep != nil {
		if hd := a.dep.holds[in.Slot]; hd != nil {
			// Its status and rollout token went with the old session
			// (behavior delete): said and taken again under the new one.
			// What it said went too: healthy, it says so again (a
			// deployment's judge and status's healthy count read the
			// status, not the instance), a deployment running or not.
			hd.pub, hd.stamped, hd.pubRetry, hd.said = "", "", time.Time{}, ""
			hd.token, hd.tokenIdx, hd.taking, hd.returning = -1, 0, false, false
			if !hd.healthySince.IsZero() || !hd.lasted.IsZero() {
				a.dep.unsaid[in.Slot] = true
			}
		}
	}
	return append(out, Record{Slot: in.Slot, Action: "claim", Reason: "its own lost slot, its instance still running"})
}
