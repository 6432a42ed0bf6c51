package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// The agent dies and comes back empty (a dev agent keeps nothing): the
// process is never restarted because of it, and its registration, checks
// and supervisor output are back soon after the agent answers.
func TestAgentRestartLosesState(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	port := freePort(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "steady" {
  command = [%q, "-http", "127.0.0.1:%d"]
  port    = %d
  check "http" {
    http     = "http://127.0.0.1:%d/"
    interval = "500ms"
  }
  restart {
    grace = "1s"
    delay = "0s"
  }
}
`, childBin, port, port, port))
	startMariposa(t, agent, nil, hcl)
	pid := waitRunning(t, c, "steady", agent.Name)

	for round := 1; round <= 2; round++ {
		agent.Kill()
		// Down for a while: the process keeps running.
		consistently(t, 2*time.Second, "the process keeps running while Consul is down", func() (bool, string) {
			return alive(pid), "dead"
		})
		agent.Start(t)
		back := time.Now()
		waitFor(t, 10*time.Second, "registration restored", func() (bool, string) {
			es := serviceEntries(c, "steady")
			if len(es) != 1 {
				return false, fmt.Sprintf("%d entries", len(es))
			}
			sc := checkByID(es[0], "steady-"+agent.Name+":mariposa")
			return sc != nil && sc.Status == api.HealthPassing && supervisorPID(sc.Output) == pid, fmt.Sprint(sc)
		})
		t.Logf("round %d: registration back %s after the agent answered", round, time.Since(back).Round(time.Millisecond))
		waitFor(t, 10*time.Second, "mariposa itself registered again", func() (bool, string) {
			return len(serviceEntries(c, "mariposa")) == 1, "not yet"
		})
		// Its http check comes back critical (Consul registers checks
		// critical) until probed; that must not restart the process.
		waitFor(t, 10*time.Second, "http check passing again", func() (bool, string) {
			es := serviceEntries(c, "steady")
			return len(es) == 1 && es[0].Checks.AggregatedStatus() == api.HealthPassing, "not yet"
		})
	}
	consistently(t, 2*time.Second, "same process", func() (bool, string) {
		sc := supervisorCheck(c, "steady", agent.Name)
		return alive(pid) && sc != nil && supervisorPID(sc.Output) == pid, fmt.Sprint(sc)
	})
	if r := instanceReport(t, supervisorCheck(c, "steady", agent.Name)); r.Restarts != 0 || r.PID != pid {
		t.Errorf("steady: %+v, want pid %d never restarted", r, pid)
	}
}

// mariposa starts before its agent: processes start anyway, and the
// registration appears once the agent answers.
func TestStartWithoutAgent(t *testing.T) {
	t.Parallel()
	host, _ := os.Hostname()
	agent := consultest.NewDevUnstarted(t, consultest.Options{Name: host})
	envFile := filepath.Join(t.TempDir(), "env")
	hcl := writeHCL(t, fmt.Sprintf(`
service "early" {
  command = [%q, "-env-file", %q]
}
`, childBin, envFile))
	startMariposa(t, agent, nil, hcl)
	env := readEnv(t, envFile)
	if env["MARIPOSA_SERVICE_ID"] != "early-"+host {
		t.Fatalf("MARIPOSA_SERVICE_ID = %q", env["MARIPOSA_SERVICE_ID"])
	}
	agent.Start(t)
	c := agent.Client(t)
	pid := waitRunning(t, c, "early", host)
	if !alive(pid) {
		t.Fatal("not alive")
	}
}
