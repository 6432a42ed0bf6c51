package cluster

import (
	"encoding/json"
	"fmt"
	"time"
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
// (MARIPOSA_SLOT_INDEX), and a write while held would change it. Live
// state (starting, healthy, ...) is in the catalog, as for every service.
type SlotValue struct {
	Node  string    `json:"node"`
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// Reason says why the slot was released or failed.
	Reason string `json:"reason,omitempty"`
	// Reschedules is the slot's reschedule tracker: it lives in the key, so
	// it survives the loss of any node.
	Reschedules []RescheduleEvent `json:"reschedules,omitempty"`
	// Takeover: this claim took the slot over from a node that lost it
	// (counted against the takeover budget, storm.go).
	Takeover bool `json:"takeover,omitempty"`
	// Version is how the holder runs the slot's instances (the run hash of
	// its unit's definition, as in a deployment's progress), and HealthyAt
	// when they first were healthy at it under the unit's update block:
	// written by the holder while a deployment runs (deployment.go).
	Version   string     `json:"version,omitempty"`
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
