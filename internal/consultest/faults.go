package consultest

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// Freeze stops the process pid (a process group when negative) with
// SIGSTOP, as a VM pause or a stall would, and waits until it is stopped.
// The returned thaw resumes it (SIGCONT); the test's cleanup does too, so
// nothing stays stopped past the test.
func Freeze(t testing.TB, pid int) (thaw func()) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("freeze %d: %v", pid, err)
	}
	thaw = func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(thaw)
	if !WaitFor(5*time.Second, func() bool { return stopped(max(pid, -pid)) }) {
		t.Fatalf("freeze %d: not stopped after 5s", pid)
	}
	return thaw
}

// Freeze stops the agent (its process group) with SIGSTOP until Thaw, the
// agent's Stop or Kill, or the end of the test.
func (a *Agent) Freeze(t testing.TB) {
	t.Helper()
	pid := a.PID()
	if pid == 0 {
		t.Fatalf("freeze %s: not running", a.Name)
	}
	Freeze(t, -pid)
}

// Thaw resumes a frozen agent.
func (a *Agent) Thaw() {
	if pid := a.PID(); pid != 0 {
		_ = syscall.Kill(-pid, syscall.SIGCONT)
	}
}

// Serf member statuses, as /v1/agent/members numbers them.
var memberStatus = map[int]string{0: "none", 1: "alive", 2: "leaving", 3: "left", 4: "failed"}

// quickClient is a client of a whose calls give up after timeout: an agent
// frozen or cut off must not hang a poll.
func (a *Agent) quickClient(timeout time.Duration) (*api.Client, error) {
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = a.HTTPAddr()
	if a.ACL {
		cfg.Token = ManagementToken
	}
	cfg.HttpClient = &http.Client{Transport: cfg.Transport, Timeout: timeout}
	return api.NewClient(cfg)
}

// MemberStatus is node's Serf LAN status as this agent sees it: "alive",
// "leaving", "left", "failed", or "none" (not a member).
func (a *Agent) MemberStatus(node string) (string, error) {
	c, err := a.quickClient(2 * time.Second)
	if err != nil {
		return "", err
	}
	ms, err := c.Agent().Members(false)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.Name == node {
			return memberStatus[m.Status], nil
		}
	}
	return "none", nil
}

// WaitMemberStatus waits until this agent sees node with the Serf status
// (see MemberStatus), and returns how long that took.
func (a *Agent) WaitMemberStatus(t testing.TB, node, status string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	ok := WaitFor(timeout, func() bool {
		s, err := a.MemberStatus(node)
		last = s
		if err != nil {
			last = err.Error()
		}
		return s == status
	})
	if !ok {
		t.Fatalf("%s sees %s %s after %s, want %s", a.Name, node, last, timeout, status)
	}
	return time.Since(start)
}

// SerfHealth is the status of node's serfHealth check in the catalog
// ("passing", "critical"; "" when the node has none), read through the
// first server that answers.
func (c *Cluster) SerfHealth(node string) (string, error) {
	var err error
	for _, s := range c.Servers {
		if s.PID() == 0 || s.IsCut() {
			continue
		}
		var cl *api.Client
		if cl, err = s.quickClient(2 * time.Second); err != nil {
			continue
		}
		var checks api.HealthChecks
		if checks, _, err = cl.Health().Node(node, nil); err != nil {
			continue
		}
		for _, ch := range checks {
			if ch.CheckID == "serfHealth" {
				return ch.Status, nil
			}
		}
		return "", nil
	}
	if err == nil {
		err = fmt.Errorf("no server to ask")
	}
	return "", err
}

// WaitSerfHealth waits until node's serfHealth check has the status
// (api.HealthPassing, api.HealthCritical) in the catalog, and returns how
// long that took.
func (c *Cluster) WaitSerfHealth(t testing.TB, node, status string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	ok := WaitFor(timeout, func() bool {
		s, err := c.SerfHealth(node)
		last = s
		if err != nil {
			last = err.Error()
		}
		return s == status
	})
	if !ok {
		t.Fatalf("serfHealth of %s is %q after %s, want %s", node, last, timeout, status)
	}
	return time.Since(start)
}

// Rejoin has agent a join the first server that is up and not cut, as
// `consul join` would. After Heal the servers then see it alive within a
// second instead of at its next push/pull or their next reconnect attempt
// (up to 30 seconds, see Heal): the join's state exchange tells a it was
// declared failed, and it refutes that at once.
func (c *Cluster) Rejoin(t testing.TB, a *Agent) {
	t.Helper()
	cl, err := a.quickClient(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Servers {
		if s == a || s.PID() == 0 || s.IsCut() {
			continue
		}
		if err = cl.Agent().Join(s.SerfAddr(), false); err == nil {
			return
		}
	}
	t.Fatalf("rejoin %s: %v", a.Name, err)
}
