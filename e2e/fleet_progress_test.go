package e2e

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// progress_deadline on a real fleet (1 server, 2 clients): a scale-up
// beyond what the nodes can hold (count 3 at max_per_node 1) is a
// deployment that can never succeed; with progress_deadline = 4s, deploy
// -wait sees it fail ("no progress within progress_deadline") once no
// instance became healthy for 4 s (plus the 2 s skew margin), and the next
// deploy is accepted without -force, as deploy's refusal promises.
//
// The step machine's judge (slot 0's holder) fails it on its own timer;
// mutation-checked with the agent's progress_deadline
// rule off (fleet/agent.JudgeUnit): deploy -wait never returns (killed).
func TestFleetProgressDeadline(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: 2})
	fleetOf(t, cl)
	spec := func(count int) string {
		return writeHCL(t, fmt.Sprintf(`
service "web" {
  command      = ["sleep", "600"]
  count        = %d
  max_per_node = 1
  update {
    health_check      = "running"
    min_healthy_time  = "1s"
    healthy_deadline  = "3s"
    progress_deadline = "4s"
  }
}
`, count))
	}
	deployWait := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(mariposaBin, append([]string{"deploy", "-consul-addr", cl.Servers[0].HTTPAddr(), "-name", "web", "-wait"}, args...)...)
		timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("deploy -wait: %v\n%s", err, out)
		return 0, ""
	}
	if code, out := deployWait(spec(2)); code != 0 {
		t.Fatalf("deploy -wait count 2: exit %d\n%s", code, out)
	}
	code, out := deployWait(spec(3))
	if code != 2 || !strings.Contains(out, "failed") || !strings.Contains(out, "no progress within progress_deadline (4s)") {
		t.Fatalf("deploy -wait count 3 on two nodes: exit %d, want 2 and the progress_deadline failure\n%s", code, out)
	}
	// Ended: the next deploy needs no -force.
	if code, out := deployWait(spec(2)); code != 0 {
		t.Fatalf("deploy -wait count 2 after the failure: exit %d\n%s", code, out)
	}
}
