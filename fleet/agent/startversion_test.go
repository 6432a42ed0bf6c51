package agent

import (
	"testing"

	"github.com/mariposa-sh/mariposa/cluster"
)

// A slot claimed under a unit's record starts at the version the record
// says: its target while it runs or once successful; after a failed
// deployment, the version the unit comes back to. A revert that failed
// (on progress_deadline: a slot no node could hold for that long) comes
// from the version that failed: its slots must not start there (found by
// the simulator: TestSimulationOps seed 2, four slots claimed after the
// revert failed ran the stalled version to the end).
func TestStartVersionAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Deployment
		k    int
		want string
	}{
		{"running", Deployment{Version: "v2", From: "v1", Stable: "v1", Status: cluster.DeployRunning, Promoted: true}, 3, "v2"},
		{"canary phase, not a canary", Deployment{Version: "v2", From: "v1", Stable: "v1", Status: cluster.DeployRunning, Canaries: 2}, 3, "v1"},
		{"successful", Deployment{Version: "v2", From: "v1", Stable: "v2", Status: cluster.DeploySuccessful}, 3, "v2"},
		{"failed, no auto_revert", Deployment{Version: "v2", From: "v1", Stable: "v1", Status: cluster.DeployFailed}, 3, "v1"},
		{"cancelled", Deployment{Version: "v2", From: "v1", Stable: "v1", Status: cluster.DeployCancelled}, 3, "v1"},
		{"a revert failed", Deployment{N: 3, Version: "v1", From: "v2-stall", Stable: "v1", Status: cluster.DeployFailed, RevertOf: 2}, 3, "v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.StartVersion(tc.k); got != tc.want {
				t.Errorf("slot %d starts at %q, want %q", tc.k, got, tc.want)
			}
		})
	}
}
