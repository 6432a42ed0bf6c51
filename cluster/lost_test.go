package cluster

import (
	"reflect"
	"testing"

	"github.com/hashicorp/consul/api"
)

// A slot whose key an invalidation deleted reads as lost with the node its
// claimed key names (held by it, no session, as behavior release would
// leave the key); a slot with a key reads as its key says, and a claimed
// key without a name (an older mariposa's) or of another shape adds
// nothing.
func TestAddLost(t *testing.T) {
	held := slotKV{value: SlotValue{Node: "n2", State: SlotHeld}, session: "s2"}
	released := slotKV{value: SlotValue{Node: "n3", State: SlotReleased}}
	for _, tc := range []struct {
		name    string
		slots   map[string]map[int]slotKV
		claimed api.KVPairs
		want    map[int]slotKV // of unit api
	}{
		{"a lost slot names its last claimer",
			map[string]map[int]slotKV{},
			api.KVPairs{{Key: ClaimedKey("api", 0), Value: []byte("n1")}},
			map[int]slotKV{0: {value: SlotValue{Node: "n1", State: SlotHeld, Reason: LostReason}}}},
		{"a held slot is as its key says",
			map[string]map[int]slotKV{"api": {0: held}},
			api.KVPairs{{Key: ClaimedKey("api", 0), Value: []byte("n1")}},
			map[int]slotKV{0: held}},
		{"a released slot is as its key says",
			map[string]map[int]slotKV{"api": {1: released}},
			api.KVPairs{{Key: ClaimedKey("api", 1), Value: []byte("n3")}},
			map[int]slotKV{1: released}},
		{"an older mariposa's claim names nobody",
			map[string]map[int]slotKV{},
			api.KVPairs{{Key: ClaimedKey("api", 0)}},
			nil},
		{"not a claimed key",
			map[string]map[int]slotKV{},
			api.KVPairs{{Key: ClaimedPrefix + "api", Value: []byte("n1")}, {Key: ClaimedPrefix + "api/x", Value: []byte("n1")},
				{Key: ClaimedPrefix + "api/-1", Value: []byte("n1")}, {Key: SlotKey("api", 0), Value: []byte("n1")}},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addLost(tc.slots, tc.claimed)
			got := tc.slots["api"]
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for k, w := range tc.want {
				if g, ok := got[k]; !ok || !reflect.DeepEqual(g.value, w.value) || g.session != w.session {
					t.Fatalf("slot %d: got %+v, want %+v", k, g, w)
				}
			}
		})
	}
}
