package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// supervisorCheck returns the supervisor check of service name on agent's
// node, or nil.
func supervisorCheck(c *api.Client, name, node string) *api.HealthCheck {
	for _, e := range serviceEntries(c, name) {
		if e.Service.ID == name+"-"+node {
			return checkByID(e, e.Service.ID+":mariposa")
		}
	}
	return nil
}

// waitRunning waits until the service's supervisor check is passing and
// returns the PID it names.
func waitRunning(t testing.TB, c *api.Client, name, node string, not ...int) int {
	t.Helper()
	var pid int
	waitFor(t, 20*time.Second, name+" running", func() (bool, string) {
		sc := supervisorCheck(c, name, node)
		if sc == nil {
			return false, "no supervisor check"
		}
		pid = supervisorPID(sc.Output)
		for _, n := range not {
			if pid == n {
				return false, "still pid " + strconv.Itoa(pid)
			}
		}
		return sc.Status == api.HealthPassing && pid > 0, sc.Status + " " + sc.Output
	})
	return pid
}

// waitSupervisor waits until the supervisor check has status and an output
// containing want.
func waitSupervisor(t testing.TB, c *api.Client, name, node, status, want string) *api.HealthCheck {
	t.Helper()
	var sc *api.HealthCheck
	waitFor(t, 20*time.Second, fmt.Sprintf("%s supervisor check %s %q", name, status, want), func() (bool, string) {
		sc = supervisorCheck(c, name, node)
		if sc == nil {
			return false, "no supervisor check"
		}
		return sc.Status == status && strings.Contains(sc.Output, want), sc.Status + " " + sc.Output
	})
	return sc
}

// consistently fails the test if cond stops holding during d.
func consistently(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok, seen := cond(); !ok {
			t.Fatalf("%s stopped holding: %s", what, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func alive(pid int) bool { return consultest.ProcessAlive(pid) }

func readPIDs(t testing.TB, path string) []int {
	t.Helper()
	var pids []int
	waitFor(t, 10*time.Second, "pids file", func() (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
		return len(pids) > 0, string(b)
	})
	return pids
}

func touch(t testing.TB, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
