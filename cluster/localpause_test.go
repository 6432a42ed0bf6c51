package cluster

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/supervisor"
)

// A held restart is named as a fleet node names it: the service alone,
// or "<service>@<unit>/<k>" for an instance in a slot, so that a drop of
// its ID reaches the pause function (pauseFuncOf uses the same target).
func TestLocalIntentsNameSlots(t *testing.T) {
	now := time.Unix(100, 0)
	snaps := []supervisor.Snapshot{
		{Service: "web", Held: "restart after exit 1"},
		{Service: "crash", Slot: "crash/2", Held: "restart after exit 1"},
		{Service: "idle"},
	}
	got := localIntents("n1", snaps, nil, map[string]time.Time{}, now)
	want := []string{"web", "crash@crash/2"}
	if len(got) != len(want) {
		t.Fatalf("intents %+v, want targets %v", got, want)
	}
	for i, in := range got {
		if in.Target != want[i] || in.ID != intentID("n1", "restart", want[i]) || in.Node != "n1" || !in.Since.Equal(now) {
			t.Errorf("intent %d: %+v, want target %q", i, in, want[i])
		}
	}
}
