package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// An args check whose result never changes keeps that result, and restarts
// nothing, for as long as it keeps it: with the default restart block
// (on_unhealthy true) and over several TTLs. Before, an unchanged result was
// never sent again, the check's TTL ran out ("TTL expired", critical) and the
// healthy service was restarted after every grace period until it failed. A
// check that really fails (exit 2) still restarts its service.
func TestArgsCheckSteadyResultRestartsNothing(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "steady" {
  command = [%[1]q]
  check "lag" {
    args     = ["sh", "-c", "echo lag is 12s; exit 0"]
    interval = "1s"
    timeout  = "2s"
  }
}

service "lagging" {
  command = [%[1]q]
  check "lag" {
    args     = ["sh", "-c", "echo lag is 40s; exit 1"]
    interval = "1s"
    timeout  = "2s"
  }
}

service "broken" {
  command = [%[1]q]
  check "lag" {
    args     = ["sh", "-c", "echo replication stopped; exit 2"]
    interval = "1s"
    timeout  = "2s"
  }
}
`, childBin))
	startMariposa(t, agent, nil, hcl)
	ttl := checks.ArgsCheckTTL(&schema.Check{Interval: time.Second, Timeout: 2 * time.Second})

	argsCheck := func(name string) *api.HealthCheck { return serviceCheck(c, name, agent.Name, "lag") }
	steady := []struct{ name, status, output string }{
		{"steady", api.HealthPassing, "lag is 12s"},
		{"lagging", api.HealthWarning, "lag is 40s"},
	}
	pids := map[string]int{}
	for _, s := range steady {
		pids[s.name] = waitRunning(t, c, s.name, agent.Name)
		waitFor(t, 20*time.Second, s.name+" args check "+s.status, func() (bool, string) {
			ch := argsCheck(s.name)
			if ch == nil {
				return false, "no check"
			}
			return ch.Status == s.status && ch.Output == s.output, ch.Status + " " + ch.Output
		})
	}
	brokenPID := waitRunning(t, c, "broken", agent.Name)

	// Four TTLs (16s), past the default grace (10s) after which an expired
	// check would have restarted the service.
	consistently(t, 4*ttl, "steady args checks and PIDs", func() (bool, string) {
		for _, s := range steady {
			ch, sc := argsCheck(s.name), supervisorCheck(c, s.name, agent.Name)
			if ch == nil || sc == nil {
				return false, s.name + ": check missing"
			}
			if ch.Status != s.status {
				return false, fmt.Sprintf("%s: args check %s %q", s.name, ch.Status, ch.Output)
			}
			if pid := supervisorPID(sc.Output); sc.Status != api.HealthPassing || pid != pids[s.name] {
				return false, fmt.Sprintf("%s: supervisor %s %q, started as pid %d", s.name, sc.Status, sc.Output, pids[s.name])
			}
		}
		return true, ""
	})

	// The control: a critical args check does restart its service.
	waitRunning(t, c, "broken", agent.Name, brokenPID)
	if ch := argsCheck("broken"); ch == nil || ch.Status != api.HealthCritical {
		t.Errorf("broken args check: %+v", ch)
	}
}

// A restarted process is not shown with the status its predecessor's args
// check left: mariposa runs the check when it starts a process, not an
// interval later. The check (interval 20s) passes while a file exists; the
// file goes and the process is killed; the restarted process's check must
// be critical in the catalog within 2s of the restart, where the next
// scheduled run would come up to 20s later.
//
// Mutation check (run by hand when written): without the kick in
// supervisor/instance.go's start, the check stays passing and this fails.
func TestArgsCheckRunsWhenProcessStarts(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	ready := filepath.Join(t.TempDir(), "ready")
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q]
  check "ready" {
    args     = ["sh", "-c", "test -f %s || exit 2"]
    interval = "20s"
  }
  restart {
    delay = "0s"
  }
}
`, childBin, ready))
	startMariposa(t, agent, nil, hcl)
	readyCheck := func() *api.HealthCheck { return serviceCheck(c, "web", agent.Name, "ready") }
	pid := waitRunning(t, c, "web", agent.Name)
	waitFor(t, 20*time.Second, "the ready check passing", func() (bool, string) {
		ch := readyCheck()
		return ch != nil && ch.Status == api.HealthPassing, fmt.Sprint(ch)
	})
	if err := os.Remove(ready); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, c, "web", agent.Name, pid)
	restarted := time.Now()
	waitFor(t, 2*time.Second, "the ready check critical after the restart", func() (bool, string) {
		ch := readyCheck()
		return ch != nil && ch.Status == api.HealthCritical, fmt.Sprint(ch)
	})
	t.Logf("critical %s after the new process was seen", time.Since(restarted).Round(time.Millisecond))
}

// serviceCheck returns the check named check of service name's instance on
// node (ID <name>-<node>), or nil.
func serviceCheck(c *api.Client, name, node, check string) *api.HealthCheck {
	for _, e := range serviceEntries(c, name) {
		if ch := checkByID(e, name+"-"+node+":"+check); ch != nil {
			return ch
		}
	}
	return nil
}
