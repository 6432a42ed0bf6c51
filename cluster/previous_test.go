package cluster

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// Both View builders fill Previous (the stickiness score's input) from the
// slot keys: a free slot's last holder is the node its released or lost
// value names; a held, failed, corrupt or never-claimed slot has none.
func TestViewPrevious(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   slotKV
		want string
	}{
		{name: "released by n2", kv: slotKV{value: SlotValue{Node: "n2", State: SlotReleased}}, want: "n2"},
		{name: "lost with n3 (held, no session)", kv: slotKV{value: SlotValue{Node: "n3", State: SlotHeld}}, want: "n3"},
		{name: "held by n1", kv: slotKV{value: SlotValue{Node: "n1", State: SlotHeld}, session: "s1"}},
		{name: "failed on n2", kv: slotKV{value: SlotValue{Node: "n2", State: SlotFailed}}},
		{name: "corrupt", kv: slotKV{value: SlotValue{Node: "n2"}, corrupt: errors.New("bad")}},
		{name: "a bare key", kv: slotKV{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[int]string{}
			if tc.want != "" {
				want[0] = tc.want
			}
			// The node's builder (plan) and the commands' (State.View).
			if got := previousHolders(map[int]slotKV{0: tc.kv}); !maps.Equal(got, want) {
				t.Errorf("previousHolders: %v, want %v", got, want)
			}
			ss := SlotState{Value: tc.kv.value, Session: tc.kv.session}
			if tc.kv.corrupt != nil {
				ss.Corrupt = tc.kv.corrupt.Error()
			}
			st := &State{Slots: map[string]map[int]SlotState{"db": {0: ss}, "other": {0: {Value: SlotValue{Node: "n9", State: SlotReleased}}}}}
			if got := st.View("db").Previous; !maps.Equal(got, want) {
				t.Errorf("State.View: %v, want %v", got, want)
			}
		})
	}
}

// With Previous filled, a sticky unit's free slot ranks its last holder
// first among equally good nodes, whichever the rendezvous hash prefers.
func TestStickinessRanksLastHolderFirst(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	u := placement.Unit{Name: "db", Placement: &schema.Placement{Count: 1}, HasVolume: true}
	nodes := []placement.NodeInfo{{Name: "n1", Fleet: true, Live: true, Eligible: true}, {Name: "n2", Fleet: true, Live: true, Eligible: true}, {Name: "n3", Fleet: true, Live: true, Eligible: true}}
	first := func(v placement.View) string {
		for _, r := range placement.Rank(u, 0, v, now) {
			if r.Rank == 0 {
				return r.Node
			}
		}
		return ""
	}
	hrw := first(placement.View{Nodes: nodes})
	for _, last := range []string{"n1", "n2", "n3"} {
		st := &State{Nodes: nodes, Slots: map[string]map[int]SlotState{"db": {0: {Value: SlotValue{Node: last, State: SlotReleased}}}}}
		if got := first(st.View("db")); got != last {
			t.Errorf("released by %s: ranked %s first (without stickiness: %s)", last, got, hrw)
		}
	}
}
