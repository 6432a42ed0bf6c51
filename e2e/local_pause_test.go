package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestLocalPause (issue 25 item 9): a mariposa run without -cluster
// follows mariposa pause as a fleet node does. Its crash-looping service
// stops being restarted once paused: the supervisor check says so, the
// queue lists the held restart, and the start count stays the same across
// several restart periods; the resume restarts it. Paused again (-group),
// a held restart dropped with queue drop stays down after the resume.
//
// Mutation check: without cluster.FollowPauses started for a node outside
// the fleet (command/fleet.go), the check never says "paused" and the
// test fails at that wait, with the start count growing.
func TestLocalPause(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	starts := filepath.Join(t.TempDir(), "starts")
	hcl := writeHCL(t, fmt.Sprintf(`
service "crash" {
  command = ["sh", "-c", "echo x >> %s; sleep 0.3; exit 1"]
  restart {
    delay    = "200ms"
    attempts = 0
  }
}
`, starts))
	m := startMariposa(t, agent, nil, hcl)
	count := func() int {
		b, _ := os.ReadFile(starts)
		return strings.Count(string(b), "x")
	}
	waitFor(t, 30*time.Second, "crash restarted at least twice", func() (bool, string) {
		return count() >= 3, fmt.Sprint(count())
	})
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(mariposaBin, append(args[:1:1], append([]string{"-consul-addr", agent.HTTPAddr()}, args[1:]...)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("mariposa %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cli("pause", "-reason", "incident 4721")
	sc := waitSupervisor(t, c, "crash", agent.Name, api.HealthCritical, "paused: would restart after exit 1")
	if !strings.Contains(sc.Output, "incident 4721") {
		t.Errorf("paused check: %q", sc.Output)
	}
	held := count()
	// Ten restart periods (delay 200ms + run 300ms): none may start.
	consistently(t, 5*time.Second, "no start while paused", func() (bool, string) {
		return count() == held, fmt.Sprintf("%d starts, %d at the pause", count(), held)
	})
	waitFor(t, 10*time.Second, "the queue lists the held restart", func() (bool, string) {
		q, _, err := cluster.ReadQueue(c)
		return err == nil && len(q) == 1 && q[0].Kind == "restart" && q[0].Target == "crash" && q[0].Node == agent.Name,
			fmt.Sprint(q, err)
	})
	cli("resume")
	waitFor(t, 30*time.Second, "crash restarted after the resume", func() (bool, string) {
		return count() > held+1, fmt.Sprintf("%d starts, %d at the pause", count(), held)
	})
	waitFor(t, 10*time.Second, "the queue empty after the resume", func() (bool, string) {
		q, _, err := cluster.ReadQueue(c)
		return err == nil && len(q) == 0, fmt.Sprint(q, err)
	})

	// Paused again, the held restart dropped from the queue: the service
	// stays down, failed, after the resume too.
	cli("pause", "-group", "crash", "-reason", "incident 4722")
	waitSupervisor(t, c, "crash", agent.Name, api.HealthCritical, "incident 4722")
	var q []cluster.Intent
	waitFor(t, 10*time.Second, "the queue lists the held restart", func() (bool, string) {
		var err error
		q, _, err = cluster.ReadQueue(c)
		return err == nil && len(q) == 1, fmt.Sprint(q, err)
	})
	if out, err := exec.Command(mariposaBin, "queue", "drop", "-consul-addr", agent.HTTPAddr(), q[0].ID).CombinedOutput(); err != nil {
		t.Fatalf("queue drop: %v\n%s", err, out)
	}
	waitSupervisor(t, c, "crash", agent.Name, api.HealthCritical, "dropped from the queue")
	cli("resume")
	dropped := count()
	consistently(t, 2*time.Second, "no start after the resume of a dropped restart", func() (bool, string) {
		return count() == dropped, fmt.Sprintf("%d starts, %d at the drop", count(), dropped)
	})
	_ = m
}

// TestLocalEvents (issue 25 item 8): on a node outside the fleet whose
// service restarted several times, mariposa events has no fleet records
// but says how many events the node's own mariposa recorded, and
// events -local prints its restarts.
func TestLocalEvents(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	starts := filepath.Join(t.TempDir(), "starts")
	m := startMariposa(t, agent, nil, writeHCL(t, fmt.Sprintf(`
service "crash" {
  command = ["sh", "-c", "echo x >> %s; sleep 0.2; exit 1"]
  restart {
    delay    = "100ms"
    attempts = 5
    window   = "1m"
  }
}
`, starts)))
	events := func(args ...string) (string, int) {
		t.Helper()
		return m.cli(t, append([]string{"events", "-consul-addr", agent.HTTPAddr()}, args...)...)
	}
	waitFor(t, 60*time.Second, "5 restarts in events -local", func() (bool, string) {
		out, code := events("-local", "-service", "crash")
		return code == 0 && strings.Count(out, " restarting ") >= 5, out
	})
	out, code := events()
	if code != 0 || !strings.HasPrefix(out, "No events in the last 1h0m0s.\nThis machine's mariposa recorded ") ||
		!strings.Contains(out, "mariposa events -local shows them") {
		t.Errorf("events: exit %d\n%s", code, out)
	}
}
