package cluster

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// Slot states in a slot key's value.
const (
	SlotHeld     = "held"     // a node holds the lock and runs the instance
	SlotReleased = "released" // given up voluntarily: claim at once (after any reschedule delay)
	SlotFailed   = "failed"   // reschedules exhausted: nobody claims it until `mariposa reset`
)

// SlotValue is the value of slots/<unit>/<k>. It is written only when the
// slot is claimed and when it is released, never while held: the key's
// ModifyIndex right after the claim is the instance's fencing token
// (MARIPOSA_SLOT_INDEX), and it stays the key's ModifyIndex for the whole
// hold, so a child's check-index on the key passes until the hold ends.
// What the holder says about its hold after the claim (the version it
// moved to, when it was healthy at it) is in the sibling status key
// (HoldStatus, UnitStatusKey); live state (running, checks) is in the
// catalog, as for every service.
type SlotValue struct {
	Node  string    `json:"node"`
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// Reason says why the slot was released or failed.
	Reason string `json:"reason,omitempty"`
	// Reschedules is the slot's reschedule tracker: it lives in the key, so
	// it survives the loss of any node.
	Reschedules []placement.RescheduleEvent `json:"reschedules,omitempty"`
	// Takeover: this claim took the slot over from a node that lost it
	// (counted against the takeover budget, storm.go).
	Takeover bool `json:"takeover,omitempty"`
	// Version is how the claimer ran the slot's instances when it claimed
	// it (the run hash of its unit's definition), as older versions
	// wrote it; the step machine's claims leave it empty
	// (its holders' versions are in UnitStatusKey). HealthyAt is only ever
	// set by a mariposa older than the status key, which wrote both into
	// the held key (moving the fencing token): read only as the hold's
	// status when no current status key exists (holdStatus).
	Version   string     `json:"version,omitempty"`
	HealthyAt *time.Time `json:"healthy_at,omitempty"`
}

// HoldStatus is the value of units/<unit>/status/<k> (UnitStatusKey):
// what the holder says about its hold after the claim. It is written only
// by the holder (fleet/executor's publish), in a transaction with
// check-session and check-index (the hold's fencing token) on the slot
// key, locked by the holder's session, and deleted with the release.
// Older versions wrote it beside the slot key instead
// (slots/<unit>/<k>/status, StatusKey), which parseSlots still reads. It describes the hold whose fencing token is Index and nothing
// else: a status whose Index is not the slot key's ModifyIndex, or for a
// slot not held, is an earlier hold's and is ignored.
//
// It is kept small (every node's watch of slots/ carries it): the holder's
// node and the hold's start are in the slot key.
type HoldStatus struct {
	Index uint64 `json:"index"` // the hold's fencing token
	// Version is how the holder runs the slot's instances now (the run
	// hash), and HealthyAt when they were first healthy at it in this
	// hold under the unit's update block (nil: not yet).
	Version   string     `json:"version"`
	HealthyAt *time.Time `json:"healthy_at,omitempty"`
}

// maxReschedules bounds the tracker kept in the key.
const maxReschedules = 32

// DecodeSlotValue reads a slot key's value. An empty value is a slot
// nobody described (a bare lock); anything else must be a SlotValue.
func DecodeSlotValue(b []byte) (SlotValue, error) {
	var v SlotValue
	if len(b) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return SlotValue{}, fmt.Errorf("not a mariposa slot value: %w", err)
	}
	switch v.State {
	case "", SlotHeld, SlotReleased, SlotFailed:
	default:
		return SlotValue{}, fmt.Errorf("unknown slot state %q", v.State)
	}
	if len(v.Reschedules) > maxReschedules {
		v.Reschedules = v.Reschedules[len(v.Reschedules)-maxReschedules:]
	}
	return v, nil
}

func (v SlotValue) encode() []byte {
	b, _ := json.Marshal(v)
	return b
}
