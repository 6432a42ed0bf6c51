package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// An operator acts on one service through the running mariposa: restart,
// reset a failed service, read its last output lines.
func TestOperatorRestartResetLogs(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q]
}

service "flaky" {
  command = ["sh", "-c", "echo out-line; echo 'config missing' >&2; exit 2"]
  restart {
    attempts = 1
    delay    = "0s"
  }
}
`, childBin))
	m := startMariposa(t, agent, nil, hcl)
	pid := waitRunning(t, c, "web", agent.Name)

	// restart: a new process, outside the restart policy.
	if out, code := m.cli(t, "restart", "web"); code != 0 {
		t.Fatalf("restart: exit %d: %s", code, out)
	}
	newPID := waitRunning(t, c, "web", agent.Name, pid)
	if alive(pid) {
		t.Errorf("old pid %d alive after restart", pid)
	}
	if r := instanceReport(t, supervisorCheck(c, "web", agent.Name)); r.Restarts != 1 || !strings.Contains(r.Reason, "restarted by an operator") {
		t.Errorf("after restart: %+v", r)
	}

	// A failed service stays failed until reset, which clears its history
	// and starts it again.
	waitSupervisor(t, c, "flaky", agent.Name, api.HealthCritical, "failed: 1 restarts")
	before := instanceReport(t, supervisorCheck(c, "flaky", agent.Name)).Since
	if out, code := m.cli(t, "reset", "flaky"); code != 0 {
		t.Fatalf("reset: exit %d: %s", code, out)
	}
	waitFor(t, 20*time.Second, "flaky failed again after a fresh history", func() (bool, string) {
		r := instanceReport(t, supervisorCheck(c, "flaky", agent.Name))
		return r.State == "failed" && r.Since.After(before), fmt.Sprintf("%+v", r)
	})

	// logs: the child's last lines, stderr tagged.
	out, code := m.cli(t, "logs", "flaky")
	if code != 0 || !strings.Contains(out, "out-line") || !strings.Contains(out, "config missing") {
		t.Errorf("logs: exit %d:\n%s", code, out)
	}

	// Unknown service: a clear error, exit 1, nothing changes.
	out, code = m.cli(t, "restart", "nope")
	if code != 1 || !strings.Contains(out, `no service "nope" on this node`) {
		t.Errorf("restart of an unknown service: exit %d: %s", code, out)
	}
	if got := waitRunning(t, c, "web", agent.Name); got != newPID {
		t.Errorf("web restarted by a request for another service: %d -> %d", newPID, got)
	}
}
