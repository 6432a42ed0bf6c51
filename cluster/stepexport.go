package cluster

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// The pure parts of the storm brake, the takeover budget, pauses and
// drains, exported for the fleet's step machine (fleet/agent), which
// decides them, and for the CLI, which writes and reads the same keys: one
// layout, one codec, one rule.

// VanishTracker follows which supervisors vanished (live -> not live) and
// when, for the storm brake.
type VanishTracker struct{ t vanishTracker }

// Observe takes the supervisors as now read and returns those that
// vanished within StormWindow (sorted) and how many were live at some
// point in it.
func (v *VanishTracker) Observe(nodes []placement.NodeInfo, now time.Time) (vanished []string, base int) {
	return v.t.observe(nodes, now)
}

// Forget drops the vanishings seen so far (the brake was lifted: only new
// ones count towards the next storm).
func (v *VanishTracker) Forget() { v.t.forget() }

// Lifted drops the vanishings seen so far and counts down (StormLifted's)
// as gone already.
func (v *VanishTracker) Lifted(down []string) { v.t.lifted(down) }

// Allows says whether a takeover of a slot lost with node from, at at,
// fits budget; if not, oldest is the window's oldest takeover.
func (l TakeoverLog) Allows(from string, at time.Time, budget int) (ok bool, oldest time.Time) {
	return l.allows(from, at, budget)
}

// With is the log with e added and the entries out of the window dropped.
func (l TakeoverLog) With(e Takeover) TakeoverLog { return l.with(e) }

// Encode is control/takeovers' value.
func (l TakeoverLog) Encode() []byte { return l.encode() }

// Encode is control/storm's value.
func (r StormRecord) Encode() []byte { return r.encode() }

// Control is what the watch on control/ says: the pauses (by unit, ""
// the whole fleet), the drains (by node), the storm brake and the
// takeover log with the index of its key (0: absent), read safety first
// (corrupt pauses pause everything, corrupt drains drain at once).
type Control struct {
	Pauses         map[string]PauseRecord
	Drains         map[string]DrainRecord
	Storm          *StormRecord
	Takeovers      TakeoverLog
	TakeoversIndex uint64
	// Drops: the intents dropped from the queue (control/drops/<id>), by
	// id (IntentID). Failed: the slots failed for good in the step
	// machine (FailedKey), by "<unit>/<k>", until mariposa reset.
	Drops  map[string]Drop
	Failed map[string]FailedRecord
	// Lifted: control/storm-lifted (nil: absent or corrupt), at
	// LiftedIndex (0: absent); when it moves, every node forgets the
	// vanishings it has seen.
	Lifted      *StormLifted
	LiftedIndex uint64
}

// ParseControl reads an answer of the watch on control/.
func ParseControl(pairs api.KVPairs, report func(key, msg string, err error)) Control {
	if report == nil {
		report = func(string, string, error) {}
	}
	var c Control
	c.Storm, c.Takeovers = parseControl(pairs, report)
	c.Pauses, c.Drops = parsePauses(pairs, report)
	c.Drains = parseDrains(pairs, report)
	for _, p := range pairs {
		switch p.Key {
		case TakeoversKey:
			c.TakeoversIndex = p.ModifyIndex
		case StormLiftedKey:
			c.LiftedIndex = p.ModifyIndex
			l, err := DecodeStormLifted(p.Value)
			if err != nil {
				// Its index still moves: the vanishings are forgotten.
				report(p.Key, "a corrupt storm-lifted record; forgetting the vanishings seen, no more", err)
				break
			}
			c.Lifted = &l
		}
		if slot, ok := strings.CutPrefix(p.Key, FailedPrefix); ok {
			var r FailedRecord
			if err := json.Unmarshal(p.Value, &r); err != nil {
				// Safety first, as a corrupt pause: the slot stays failed
				// (mariposa reset deletes the mark).
				report(p.Key, "a corrupt failed-slot mark; the slot stays failed (mariposa reset clears it)", err)
				r = FailedRecord{Reason: "a corrupt failed-slot mark"}
			}
			r.Index = p.ModifyIndex
			if c.Failed == nil {
				c.Failed = map[string]FailedRecord{}
			}
			c.Failed[slot] = r
		}
	}
	return c
}

// FailedPrefix holds the step machine's failed slots: control/failed/
// <unit>/<k>, set by the holder's release when the slot's instance failed
// for good (its restarts exhausted), deleted by mariposa reset. While it
// is there no node claims the slot (every claim checks it is absent). The
// slot key's value says failed too (SlotFailed), for mariposa status.
const FailedPrefix = ControlPrefix + "failed/"

// FailedKey is slot k of unit's failed mark.
func FailedKey(unit string, k int) string { return FailedPrefix + unit + "/" + strconv.Itoa(k) }

// FailedRecord is a failed mark's value; Index is its key's ModifyIndex
// (not encoded: the reset's check-index).
type FailedRecord struct {
	Node   string    `json:"node"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	Index  uint64    `json:"-"`
}

// Encode is the mark's value.
func (r FailedRecord) Encode() []byte { b, _ := json.Marshal(r); return b }

// PauseFunc is what node's supervisor asks each instance's pause of under
// c (nil: nothing paused), as FollowPauses gives it too: the
// restarts of every instance, in a slot or not, that a pause of scope all
// covers wait, and a dropped one stays down. An executor's instances
// (fleet/executor's RestartHolder) can give it to their runner.
func (c Control) PauseFunc(node string) supervisor.PauseFunc {
	return pauseFuncOf(c.Pauses, c.Drops, node)
}

// IntentID names an intent of node's queue (mariposa queue drop ID) as
// FollowPauses names it too.
func IntentID(node, kind, target string) string { return intentID(node, kind, target) }

// Paused is the pause of unit for scope (PausePlacement, PauseDeploy), if
// any: the whole fleet's, else the unit's.
func (c Control) Paused(unit, scope string) (PauseRecord, bool) {
	if r, ok := c.Pauses[""]; ok && r.covers(scope) {
		return r, true
	}
	if r, ok := c.Pauses[unit]; ok && unit != "" && r.covers(scope) {
		return r, true
	}
	return PauseRecord{}, false
}
