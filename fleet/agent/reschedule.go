package agent

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// Reschedules in the step machine (CLUSTER.md section 3, "Reschedules";
// the penalty and the delay's rule are cluster's: PenaltyKey, NextDelay):
//
//   - A unit whose services say restart.on_exhausted = "reschedule"
//     (Unit.Reschedule): the instance that failed for good (InstanceFailed,
//     with the slot's history as Consul had it, RescheduleHistoryKey) is
//     stopped and its slot released with a penalty for this node
//     (cluster.PenaltyKey, cluster's codec {"until","reason"}), the slot's
//     history with this failure appended (its own key, and the released
//     slot value's `reschedules`, cluster.SlotValue) and its
//     "reschedule" audit record, in the release's transaction. Once the
//     history holds more than reschedule.attempts failures within
//     reschedule.interval (placement.NextDelay), the slot fails instead, as
//     reset.go's failed path (its mark, "fail", with the penalty and the
//     history all the same), until mariposa reset, whose transaction also
//     deletes the history.
//   - The other nodes rank the slot with the penalty (PenaltiesAnswer);
//     this node knows its own at once, and it steps aside for that slot
//     while its penalty runs and another node not penalized ranks it, so
//     a view of penalty/ older than the vacancy cannot give the slot back
//     to it (every node penalized: the ranking alone decides).
//   - A group (Unit.Group: several services in one slot) fails as one:
//     the supervisor reports the member that failed for good
//     (InstanceFailed.Service); the whole slot stops, and moves
//     (reschedule) or fails with "member <service> failed: <reason>".
//
//   - The reschedule delay (placement.NextDelay's delay after the failure,
//     reschedule.delay and its function): the release also sets the
//     slot's DelayKey in the unit's index, whose name carries the time
//     the slot may be claimed from (Rescheduled.After), so every view
//     that shows the slot free shows its delay, at no cost to the
//     watches. A node ranked for it claims at that time plus its rank's
//     delay, and the claim's transaction
//     deletes the mark (Claim.Delays). The release also sets the slot's
//     DelayGuardKey, which every claim whose view shows no mark checks
//     does not exist (and one that shows it deletes): a claim made on a
//     view older than the release (which may show the slot free from
//     before its last holder claimed it) is refused as Taken, and the
//     slot waits for a newer view, which shows the delay.

// RescheduleHistoryKey holds a slot's reschedule history (JSON, a list of
// placement.RescheduleEvent, oldest first, at most 32): the step machine's
// claims do not carry the slot key's value forward, so the history lives
// beside it. Written by a reschedule's release, deleted by mariposa reset.
func (s SlotID) RescheduleHistoryKey() string {
	return cluster.Prefix + "reschedules/" + s.Unit + "/" + strconv.Itoa(s.K)
}

// ParseRescheduleHistory reads the history key's value (nil: none or
// unreadable).
func ParseRescheduleHistory(b []byte) []placement.RescheduleEvent {
	var h []placement.RescheduleEvent
	if len(b) == 0 || json.Unmarshal(b, &h) != nil {
		return nil
	}
	return h
}

// maxHistory bounds the history kept (cluster's maxReschedules).
const maxHistory = 32

// Rescheduled is what a reschedule's release also writes.
type Rescheduled struct {
	// History: the slot's history, this failure last (the history key,
	// and the slot value's `reschedules`).
	History []placement.RescheduleEvent
	// Until: the end of this node's penalty for the unit; Reason its why.
	Until  time.Time
	Reason string
	// After: no claim of the slot before then (the failure plus
	// placement.NextDelay's delay; zero for a slot that fails): the
	// release sets the slot's DelayKey(After).
	After time.Time
}

// DelayKey is the mark of a slot released by a reschedule, in its unit's
// index: <index>/<k>.after.<unix ms>, no claim before that time. A name
// that is no slot number, so an index reader that does not know it skips
// it; set by the reschedule's release, deleted by the next claim's
// transaction (which saw it in its view).
func (s SlotID) DelayKey(after time.Time) string {
	return IndexPrefix(s.Unit) + strconv.Itoa(s.K) + delayMark + strconv.FormatInt(after.UnixMilli(), 10)
}

const delayMark = ".after."

// DelayGuardKey exists while slot s waits for its reschedule delay: set
// with its DelayKey by the reschedule's release (its value the time, for
// people), deleted by the claim that saw the DelayKey; a claim on a view
// without the mark checks that it does not exist. Outside the index, so
// that no watch carries it.
func (s SlotID) DelayGuardKey() string {
	return cluster.Prefix + "delay/" + s.Unit + "/" + strconv.Itoa(s.K)
}

// parseDelayKey reads the part of a DelayKey after the index prefix.
func parseDelayKey(rest string) (k string, after time.Time, ok bool) {
	k, ms, found := strings.Cut(rest, delayMark)
	if !found {
		return "", time.Time{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return "", time.Time{}, false
	}
	return k, time.UnixMilli(n), true
}

// afterReschedule is when a claim of sl at rank delay d is due, given
// when it is due otherwise: not before the slot's reschedule delay ends
// plus d, when that delay ends after the vacancy was first seen; delayed
// says it moved.
func (a *Agent) afterReschedule(when time.Time, vac vacancy, sl Slot, d time.Duration) (time.Time, bool) {
	if a.cfg.Faults.NoRescheduleDelay || !sl.After.After(vac.since) {
		return when, false
	}
	if t := sl.After.Add(d); t.After(when) {
		return t, true
	}
	return when, false
}

// EncodeHistory is the history key's value.
func (r Rescheduled) EncodeHistory() []byte { b, _ := json.Marshal(r.History); return b }

// EncodePenalty is cluster.PenaltyKey's value, as cluster.ParsePenalties
// reads it.
func (r Rescheduled) EncodePenalty() []byte {
	b, _ := json.Marshal(map[string]any{"until": r.Until, "reason": r.Reason})
	return b
}

// OnExhausted says what a unit's services ask of a slot failed for good:
// reschedule, a service's restart.on_exhausted = "reschedule"; group,
// several services in the slot.
func OnExhausted(spec cluster.UnitSpec) (reschedule, group bool) {
	for _, s := range spec.Services {
		if s != nil && s.Restart.OnExhausted == "reschedule" {
			reschedule = true
		}
	}
	return reschedule, len(spec.Services) > 1
}

// reschedulePolicy is u's reschedule block (the schema's defaults when
// it has no placement).
func reschedulePolicy(u Unit) schema.Reschedule {
	if u.Placement != nil {
		return u.Placement.Reschedule
	}
	return schema.Reschedule{Unlimited: true, Delay: schema.DefaultRescheduleDelay, DelayFunction: schema.DelayExponential,
		MaxDelay: schema.DefaultRescheduleMaxDelay, Penalty: schema.DefaultReschedulePenalty}
}

// failReason is what InstanceFailed's slot is released (or failed) for.
func failReason(u Unit, in InstanceFailed) string {
	switch {
	case in.Service == "":
		return in.Reason
	case u.Reschedule:
		return in.Service + ": " + in.Reason
	case u.Group:
		return "member " + in.Service + " failed: " + in.Reason
	}
	return in.Reason
}

// rescheduleRelease is the release of a slot whose failure reschedules:
// with its penalty and history, or failed once the history is exhausted.
func (a *Agent) rescheduleRelease(now time.Time, id SlotID, f *failing, out []any) []any {
	p := reschedulePolicy(f.unit)
	hist := append(slices.Clone(f.history), placement.RescheduleEvent{Node: a.cfg.Node, At: now, Reason: f.reason})
	if len(hist) > maxHistory {
		hist = hist[len(hist)-maxHistory:]
	}
	r := &Rescheduled{History: hist, Until: now.Add(p.Penalty), Reason: f.reason}
	a.penalize(id, r.Until)
	delay, exhausted := placement.NextDelay(p, hist, now)
	if exhausted && !a.cfg.Faults.IgnoreAttempts {
		// Failed, with its penalty and history all the same: after the
		// reset, the others rank it first.
		reason := "rescheduled " + strconv.Itoa(len(hist)) + " times: " + f.reason
		why := reason + "; mariposa reset " + id.String() + " clears it"
		return append(out, Release{Slot: id, Session: a.session, Reschedule: r, Failed: &cluster.FailedRecord{Node: a.cfg.Node, Reason: reason, At: now}},
			Record{Slot: id, Action: "fail", Reason: why})
	}
	if delay > 0 {
		r.After = now.Add(delay)
	}
	return append(out, Release{Slot: id, Session: a.session, Reschedule: r},
		Record{Slot: id, Action: "reschedule", Reason: "rescheduled: " + f.reason})
}

// penalize: this node's own penalty for id's unit, known at once (the
// watch's answer says the same later). The answer's maps may be shared
// (the simulator hands one to every node): copied, never written.
func (a *Agent) penalize(id SlotID, until time.Time) {
	if a.cfg.Faults.NoStepAside {
		return
	}
	pen := make(map[string]map[string]time.Time, len(a.place.pen)+1)
	for u, m := range a.place.pen {
		pen[u] = m
	}
	m := make(map[string]time.Time, len(pen[id.Unit])+1)
	for n, t := range pen[id.Unit] {
		m[n] = t
	}
	if until.After(m[a.cfg.Node]) {
		m[a.cfg.Node] = until
	}
	pen[id.Unit] = m
	a.place.pen = pen
	if a.rs.stepAside == nil {
		a.rs.stepAside = map[SlotID]time.Time{}
	}
	a.rs.stepAside[id] = until
	a.markDirty(id.Unit)
}

// stepAside drops from mine the slots of u this node rescheduled whose
// penalty still runs, where another node ranks.
func (a *Agent) stepAside(u string, asg Ranking, mine map[int]Place, now time.Time) {
	if len(a.rs.stepAside) == 0 || a.cfg.Faults.NoStepAside {
		return
	}
	for id, until := range a.rs.stepAside {
		if !until.After(now) {
			delete(a.rs.stepAside, id)
			continue
		}
		if id.Unit != u {
			continue
		}
		if _, ok := mine[id.K]; !ok {
			continue
		}
		// Another ranked node whose own penalty does not run (all
		// penalized: nobody would step in, and the slot would wait).
		penalized := map[int]bool{}
		for n, t := range a.place.pen[u] {
			if i, ok := asg.pos[n]; ok && t.After(now) {
				penalized[i] = true
			}
		}
		self := asg.pos[a.cfg.Node]
		for i, p := range asg.places[id.K] {
			if i != self && p.Rank >= 0 && !penalized[i] {
				delete(mine, id.K)
				break
			}
		}
	}
}
