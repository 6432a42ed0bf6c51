package cluster

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// parseSlots gives a slot its hold's status only from a status key written
// in the current hold (its Index is the lock key's ModifyIndex, which the
// holder never moves); else, for a held key, what the key itself says (the
// claim's version, and what an older mariposa wrote there).
func TestParseSlotsHoldStatus(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	enc := func(v any) []byte { b, _ := json.Marshal(v); return b }
	held := func(index uint64, v SlotValue) *api.KVPair {
		v.Node, v.State = "n1", SlotHeld
		return &api.KVPair{Key: SlotKey("web", 0), Value: enc(v), Session: "s1", ModifyIndex: index}
	}
	status := func(st HoldStatus) *api.KVPair {
		return &api.KVPair{Key: StatusKey("web", 0), Value: enc(st), ModifyIndex: 99}
	}
	released := &api.KVPair{Key: SlotKey("web", 0), Value: enc(SlotValue{Node: "n1", State: SlotReleased, Version: "v1"}), ModifyIndex: 20}
	for _, tc := range []struct {
		name    string
		pairs   api.KVPairs
		version string // "" : no status
		healthy bool
	}{
		{name: "claimed, nothing said yet: the claim's version, not healthy",
			pairs: api.KVPairs{held(10, SlotValue{Version: "v1"})}, version: "v1"},
		{name: "status of this hold",
			pairs:   api.KVPairs{held(10, SlotValue{Version: "v1"}), status(HoldStatus{Index: 10, Version: "v2", HealthyAt: &t0})},
			version: "v2", healthy: true},
		{name: "status of an earlier hold (a re-claim): ignored",
			pairs: api.KVPairs{held(12, SlotValue{Version: "v1"}), status(HoldStatus{Index: 10, Version: "v1", HealthyAt: &t0})}, version: "v1"},
		{name: "status key sorted before its slot key: still bound",
			pairs:   api.KVPairs{status(HoldStatus{Index: 10, Version: "v1", HealthyAt: &t0}), held(10, SlotValue{Version: "v1"})},
			version: "v1", healthy: true},
		{name: "an older holder wrote its health into the key",
			pairs:   api.KVPairs{held(14, SlotValue{Version: "v1", HealthyAt: &t0})},
			version: "v1", healthy: true},
		{name: "not held: no status, whatever the keys say",
			pairs: api.KVPairs{released, status(HoldStatus{Index: 20, Version: "v1", HealthyAt: &t0})}},
		{name: "held by a mariposa that said no version", pairs: api.KVPairs{held(10, SlotValue{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var problems []string
			slots := parseSlots(tc.pairs, func(key, msg string, err error) { problems = append(problems, key+": "+msg) })
			if len(problems) > 0 {
				t.Fatalf("problems: %v", problems)
			}
			if len(slots) != 1 || len(slots["web"]) != 1 {
				t.Fatalf("slots: %+v", slots)
			}
			st := slots["web"][0].status
			switch {
			case tc.version == "" && st != nil:
				t.Fatalf("status %+v, want none", st)
			case tc.version == "":
			case st == nil:
				t.Fatalf("no status, want version %s", tc.version)
			case st.Version != tc.version || (st.HealthyAt != nil) != tc.healthy:
				t.Fatalf("status %+v, want version %s healthy %v", st, tc.version, tc.healthy)
			}
		})
	}
}
