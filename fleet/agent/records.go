package agent

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mariposa-sh/mariposa/cluster"
)

// Where each decision's audit record is written (project rule: "every
// automatic decision in the fleet is recorded with the decision, in the
// same transaction"). A step returns its decisions' Records beside the
// actions that carry them out; Audits says, for one step's actions, where
// each Record goes, so that the executor and the simulator write (and
// count) the same transactions.
//
//   - Written: the transaction of the decision writes it already, built
//     from the action (a failed slot's Release; WriteBrake; the
//     restore's acknowledgement).
//   - Riding: it goes in the transaction of an action of the same step,
//     the one that carries the decision out: a Claim or Release of the
//     same slot (a claim's "claim", with its rank, and "takeover from a
//     lost node" for a takeover; a stray's release, a drain's release:
//     a drain's is a "release" whose reason says "drained from").
//   - Deferred: a decision to stop (or hand off) and then release
//     (scaled down, a drain's stop, a reschedule after a failed restore;
//     Record.Deferred): the slot's Release carries it (Release.Audit)
//     when it comes; lost before, the "lost" log line says so.
//   - Alone: a decision with no transaction: its own transaction, the
//     audit record only (none is made so today).
//   - Logged: a claim, an update or a failed slot's release held back
//     ("hold"): not a decision of this node but the effect of one
//     recorded already, by whoever made it: the storm brake's record,
//     the takeovers' claim records and log (the budget), the pause's record
//     (and the node's queue lists each held claim and update), the
//     failed slot's "fail" record. Written
//     alone, every node placed for a slot would write one when its claim
//     time comes, O(nodes x vacancies) writes in the storm the brake and
//     the budget are there to damp (fleet/sim -ops, 50 nodes, seeds
//     1-3: 18.2 transactions per vacancy instead of 7.9). The executor
//     logs them; Waiting shows them while they last. So are the node's
//     queue ("queue": a report of what the pause holds back, whose
//     record is the pause's), a drain's status ("drain-status": a report
//     for the drain's watchers, not a decision) and the stop of a drained slot's old instance
//     ("orphan-stop": its release's record said it runs until another
//     node holds the slot, or handoffTimeout): none is a record of
//     website/operations.md's table (a drain there is the operator's
//     "drain", then a "release" per slot). A hold lost ("lost": the
//     session invalidated, the hold unconfirmed, the key another
//     session's) is not this node's decision but Consul's or the lease's:
//     logged, not written (website/operations.md: a holder that loses its
//     slot writes no record); the instance's end is in the node's own
//     audit file (slot-lost), and the slot's move is the next holder's
//     claim record ("takeover from a lost node", from the lost node).
//
// The vocabulary is website/operations.md's table: a
// claim says its rank, and "takeover from a lost node" (from: the lost
// node); a handoff of a slot's data, and a handoff that could not be
// published, are said in the reason of the release that follows it
// (handedOff); a rollout's
// instance not healthy in time is "rollout-failed", to its version.

// Where says where a Record is written (see Audits).
type Where int

// The places of a record.
const (
	Alone Where = iota
	Written
	Riding
	Deferred
	Logged
)

// written: the actions whose records the decision's own transaction
// writes, from the action itself.
var written = map[string]bool{"fail": true, "storm-brake": true, "restore": true}

// logged: the actions logged, never written (see Audits).
var logged = map[string]bool{"hold": true, "queue": true, "drain-status": true, "orphan-stop": true, "lost": true}

// Audits sorts one step's Records: riding[i] are the records that go in
// the transaction of acts[i]; alone are written in a transaction of their
// own. Written, Deferred and Logged records are in neither.
func Audits(acts []any) (riding map[int][]Record, alone []Record) {
	for _, a := range acts {
		r, ok := a.(Record)
		if !ok {
			continue
		}
		w, i := AuditPlace(acts, r)
		switch w {
		case Riding:
			if riding == nil {
				riding = map[int][]Record{}
			}
			riding[i] = append(riding[i], r)
		case Alone:
			alone = append(alone, r)
		}
	}
	return riding, alone
}

// AuditPlace is where r, one of acts, is written; with Riding, the index of
// the action whose transaction carries it.
func AuditPlace(acts []any, r Record) (Where, int) {
	switch {
	case written[r.Action]:
		return Written, -1
	case r.Deferred:
		return Deferred, -1
	case logged[r.Action]:
		return Logged, -1
	}
	for i, a := range acts {
		switch a := a.(type) {
		case Claim:
			if a.Slot == r.Slot && r.Action == "claim" {
				return Riding, i
			}
		case Release:
			if a.Slot == r.Slot {
				return Riding, i
			}
		}
	}
	return Alone, -1
}

// then marks r as carried by the hold's Release when it comes, and keeps
// it for it.
func (h *held) then(r Record) Record {
	r.Deferred = true
	h.release = r
	return r
}

// claimRecord is a claim's record (website/operations.md): its rank
// in the unit's ranking, "takeover from a lost node" for a takeover, from
// the slot's previous holder where this node knows it.
func claimRecord(id SlotID, rank int, tk *TakeoverCAS, prev string) Record {
	r := Record{Slot: id, Action: "claim", Reason: fmt.Sprintf("rank %d", rank), From: prev}
	if tk != nil {
		r.Reason += "; takeover from a lost node"
		if !strings.HasPrefix(tk.Entry.From, UnknownHolder) {
			r.From = tk.Entry.From
		}
	}
	return r
}

// claimFrom is the holder a claim of free slot k of v's unit takes it
// from, as this agent knows it: the lost holder it waits for
// (lastHolder), else seenHolder; "" when it does not know.
func (a *Agent) claimFrom(r *unitRec, v *SlotsView, k int) string {
	if n := a.lastHolder(r, SlotID{v.Unit, k}); n != "" {
		return n
	}
	return a.seenHolder(v, k)
}

// seenHolder is the node this agent last saw holding free slot k of v's
// unit (lost with it, or the previous holder of a Sticky unit's slot), ""
// when it does not know.
func (a *Agent) seenHolder(v *SlotsView, k int) string {
	if n := a.ops.lostFrom[SlotID{v.Unit, k}]; n != "" {
		return n
	}
	return a.place.prev[v.Unit][k]
}

// handedOff is the reason of a release after its handoff (HandoffDone):
// what the handoff did, or that there was none ("no handoff of its data:
// ...", website/operations.md's release row).
func handedOff(reason string, done HandoffDone) string {
	switch {
	case !done.OK:
		return reason + "; no handoff of its data: " + done.Note
	case done.Note != "":
		return reason + "; " + done.Note
	}
	return reason
}

// scaledDown is the record of a hold given up because its unit no longer
// has the slot, in website/operations.md's words: "count is N", "unit removed",
// or "mariposa stopped" (UnitsAnswer.Stopping).
func (a *Agent) scaledDown(id SlotID, u Unit, ok bool) Record {
	why := "unit removed"
	switch {
	case a.stopping:
		why = "mariposa stopped"
	case ok:
		why = fmt.Sprintf("count is %d", u.Count)
	}
	return Record{Slot: id, Action: "release", Reason: why}
}

// moveRecords are the records of the judge's move of unit's deployment
// from cur to next, in website/operations.md's shape:
// named by the deployment (its service) and the unit (its slot), to the
// spec number (cur.Spec's, "<name>/<n>"); a revert is "deploy-failed" then
// "deploy-revert" (from the failed spec to the stable one it runs again),
// in one transaction.
func moveRecords(unit, what string, cur, next *Deployment, reason string) (Record, Record) {
	id := SlotID{unit, -1}
	name, n, err := cluster.ParseSpecVersion(cur.Spec)
	if err != nil {
		n = cur.N // no spec: the unit's deployment number
	}
	spec := strconv.FormatUint(n, 10)
	r := Record{Slot: id, Action: what, To: spec, Reason: reason, Deployment: name}
	if what != "deploy-revert" {
		return r, Record{}
	}
	r.Action = "deploy-failed"
	if next.Ended != nil {
		r.Reason = next.Ended.Reason
	}
	rv := Record{Slot: id, Action: "deploy-revert", From: spec, To: next.Version, Deployment: name,
		Reason: "auto_revert to stable version " + next.Version}
	if _, m, err := cluster.ParseSpecVersion(next.Version); err == nil {
		rv.To = strconv.FormatUint(m, 10)
		rv.Reason = fmt.Sprintf("auto_revert to stable spec %d (%s)", m, next.Version)
	}
	return r, rv
}
