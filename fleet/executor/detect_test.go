package executor_test

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestDetectIsTheAgents: an exclusive hold rides a Consul election for
// D + lock_delay/2 (internal/holdrule), where D must be the cluster's
// gossip floor, not Consul's defaults: a cluster tuned to detect failures
// in 900 ms lets its leader invalidate a cut-off holder's session that much
// sooner, and with D = 4 s the holder's instance ran on for seconds beside
// its successor (e2e TestFleetMinorityPartitionDiesInTime, one run in ten
// under load). An agent that cannot say its timing gets the strict rule.
func TestDetectIsTheAgents(t *testing.T) {
	fast := consultest.NewDev(t, consultest.Options{ExtraConfig: map[string]any{"gossip_lan": consultest.FastGossip}})
	for _, tc := range []struct {
		name   string
		detect time.Duration
		want   time.Duration
	}{
		{"the agent's gossip floor", 0, 3 * 300 * time.Millisecond},
		{"given", 2 * time.Second, 2 * time.Second},
		{"strict", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := executor.New(executor.Config{Client: fast.Client(t), Node: "n", Detect: tc.detect})
			if got := ex.Detect(); got != tc.want {
				t.Errorf("Detect() = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("unreadable: strict", func(t *testing.T) {
		down := consultest.NewDev(t)
		c := down.Client(t)
		down.Kill()
		if got := executor.New(executor.Config{Client: c, Node: "n"}).Detect(); got != 0 {
			t.Errorf("Detect() with the agent down = %v, want 0 (the strict rule)", got)
		}
	})
}
