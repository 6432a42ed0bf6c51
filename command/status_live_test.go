package command

import "testing"

// A slot's instances are live for the healthy count only when every one
// registered in it is on its holder, running and passing (or without
// checks); a slot with none registered is not.
func TestLiveSlots(t *testing.T) {
	rows := []InstanceStatus{
		{Service: "api", Node: "n1", Slot: "api/0", State: "running", Health: "passing"},
		{Service: "api", Node: "n2", Slot: "api/1", State: "running", Health: "critical"},
		{Service: "api", Node: "n3", Slot: "api/2", State: "paused", Health: "passing"},
		{Service: "api", Node: "n1", Slot: "api/3", State: "running", Health: "-"},
		{Service: "api", Node: "n9", Slot: "api/4", State: "running", Health: "passing"}, // the drained node's, still running
		{Service: "web", Node: "n1", Slot: "front/0", State: "running", Health: "passing"},
		{Service: "side", Node: "n1", Slot: "front/0", State: "starting", Health: "-"},
		{Service: "web", Node: "n2", Slot: "front/1", State: "running", Health: "passing"},
		{Service: "side", Node: "n2", Slot: "front/1", State: "running", Health: "warning"},
		{Service: "web", Node: "n3", Slot: "front/2", State: "running", Health: "passing"},
		{Service: "side", Node: "n3", Slot: "front/2", State: "running", Health: "passing"},
	}
	live := liveSlots(rows)
	for _, tc := range []struct {
		unit string
		k    int
		node string
		want bool
	}{
		{"api", 0, "n1", true},
		{"api", 1, "n2", false}, // critical
		{"api", 2, "n3", false}, // paused
		{"api", 3, "n1", true},  // no checks
		{"api", 4, "n5", false}, // its instance is on another node than the holder
		{"api", 5, "n1", false}, // nothing registered
		{"front", 0, "n1", false},
		{"front", 1, "n2", false},
		{"front", 2, "n3", true},
	} {
		if got := live(tc.unit, tc.k, tc.node); got != tc.want {
			t.Errorf("%s/%d on %s: live %v, want %v", tc.unit, tc.k, tc.node, got, tc.want)
		}
	}
}
