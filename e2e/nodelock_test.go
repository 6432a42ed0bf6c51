package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/lease"
)

// Two mariposas on one node used to fight: the second took over the
// first's registrations, and stopping it deregistered the first's
// services. Now the second refuses to start, naming the first; after a
// crash, the next one takes over once the dead one's lock is gone.
func TestSecondSupervisorRefused(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q]
}
`, childBin))
	first := startMariposa(t, agent, nil, hcl)
	pid := waitRunning(t, c, "web", agent.Name)

	second := startMariposa(t, agent, nil, hcl)
	select {
	case <-second.done:
	case <-time.After(30 * time.Second):
		t.Fatal("a second mariposa on the node did not refuse to start")
	}
	if code := second.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("second mariposa exit %d, want 1", code)
	}
	want := fmt.Sprintf("another mariposa (pid %d on host", first.cmd.Process.Pid)
	if out := second.out.String(); !strings.Contains(out, want) || !strings.Contains(out, "supervises node "+agent.Name) {
		t.Errorf("the refusal does not name the first supervisor (%q):\n%s", want, out)
	}
	// The first's service is untouched: same process, still registered.
	consistently(t, 2*time.Second, "the first supervisor's service untouched", func() (bool, string) {
		sc := supervisorCheck(c, "web", agent.Name)
		return sc != nil && supervisorPID(sc.Output) == pid && alive(pid), fmt.Sprint(sc)
	})

	// kill -9 of the first: a new one started at once waits for the dead
	// one's lock (liveness TTL + lock delay) and takes over.
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	third := startMariposa(t, agent, nil, hcl)
	newPID := waitRunning(t, c, "web", agent.Name, pid)
	if third.exited() {
		t.Fatalf("the next mariposa after a crash exited:\n%s", third.out.String())
	}
	if alive(pid) {
		t.Errorf("the crashed supervisor's child %d is alive", pid)
	}
	_ = newPID
}

// A graceful stop releases the node lock before anything invalidates its
// session, so the next mariposa on the node starts at once, without a lock
// delay (deregistering mariposa's own service first invalidated the
// session, and a restart waited out the lock delay).
func TestGracefulStopFreesNodeLock(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, fmt.Sprintf("service \"web\" {\n  command = [%q]\n}\n", childBin))
	m := startMariposa(t, agent, nil, hcl)
	waitRunning(t, c, "web", agent.Name)
	if code := m.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	s, _, err := c.Session().Create(&api.SessionEntry{Name: "probe", Checks: []string{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Session().Destroy(s, nil)
	// Consul refuses an acquire while a lock delay is in force.
	ok, _, err := c.KV().Acquire(&api.KVPair{Key: lease.NodeLockKey(agent.Name), Session: s}, nil)
	if err != nil || !ok {
		t.Fatalf("the node lock is not free right after a graceful stop (acquire %v, %v): a lock delay is in force", ok, err)
	}
}
