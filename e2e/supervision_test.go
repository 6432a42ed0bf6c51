package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A check that stays critical restarts the process (found through the
// blocking health query); a flap shorter than unhealthy_for restarts nothing.
func TestHealthDrivenRestartAndFlapGuard(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	sick, flap := filepath.Join(dir, "sick"), filepath.Join(dir, "flap")
	p1, p2 := freePort(t), freePort(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "sick" {
  command = [%q, "-http", "127.0.0.1:%d", "-unhealthy-file", %q]
  check "http" {
    http     = "http://127.0.0.1:%d/"
    interval = "200ms"
    timeout  = "500ms"
  }
  restart {
    grace         = "2s"
    unhealthy_for = "0s"
    delay         = "0s"
  }
}

service "flappy" {
  command = [%q, "-http", "127.0.0.1:%d", "-unhealthy-file", %q]
  check "http" {
    http     = "http://127.0.0.1:%d/"
    interval = "200ms"
    timeout  = "1s"
  }
  restart {
    grace         = "1s"
    unhealthy_for = "5s"
  }
}
`, childBin, p1, sick, p1, childBin, p2, flap, p2))
	startMariposa(t, agent, nil, hcl)
	sickPID := waitRunning(t, c, "sick", agent.Name)
	flapPID := waitRunning(t, c, "flappy", agent.Name)
	// Both checks pass before we break anything.
	waitFor(t, 20*time.Second, "checks passing", func() (bool, string) {
		es := append(serviceEntries(c, "sick"), serviceEntries(c, "flappy")...)
		return len(es) == 2 && es[0].Checks.AggregatedStatus() == api.HealthPassing && es[1].Checks.AggregatedStatus() == api.HealthPassing, "not yet"
	})

	touch(t, sick)
	// sick: restarted after its check goes critical; the new process is
	// still sick, but is not restarted before its grace period is over: the
	// kernel's start times of the second and third processes are at least
	// grace (2s) apart. Without the grace, the check's critical status
	// would count once the check has had time to report for this run
	// (interval + timeout, 0.7s: a critical status that never turned is
	// taken as the previous run's until then), well before 2s.
	newPID := waitRunning(t, c, "sick", agent.Name, sickPID)
	newStart, ok := procStart(newPID)
	if !ok {
		t.Fatalf("the restarted sick process %d is gone at once: not kept for its grace", newPID)
	}
	sc := supervisorCheck(c, "sick", agent.Name)
	if !strings.Contains(sc.Output, `last after check "http" critical`) {
		t.Errorf("supervisor output %q does not say why it restarted", sc.Output)
	}
	if alive(sickPID) {
		t.Errorf("old sick process %d still alive", sickPID)
	}
	thirdPID := waitRunning(t, c, "sick", agent.Name, sickPID, newPID)
	thirdStart, ok := procStart(thirdPID)
	os.Remove(sick)
	if !ok {
		t.Fatalf("the third sick process %d is gone at once", thirdPID)
	}
	// /proc's start times count clock ticks of 10 ms.
	if gap := thirdStart - newStart; gap < 2*time.Second-10*time.Millisecond {
		t.Errorf("the sick process %d was restarted %v after its start, within its grace of 2s", newPID, gap)
	} else {
		t.Logf("the sick process was restarted %v after its start (grace 2s)", gap)
	}

	// flappy: critical for about a second, then healthy again (made sick
	// only now: the sick part lasts longer than flappy's unhealthy_for).
	touch(t, flap)
	waitFor(t, 10*time.Second, "flappy critical", func() (bool, string) {
		es := serviceEntries(c, "flappy")
		return len(es) == 1 && checkByID(es[0], "flappy-"+agent.Name+":http").Status == api.HealthCritical, "not yet"
	})
	time.Sleep(time.Second) // the flap itself: shorter than unhealthy_for
	os.Remove(flap)
	waitFor(t, 10*time.Second, "flappy passing again", func() (bool, string) {
		es := serviceEntries(c, "flappy")
		return len(es) == 1 && checkByID(es[0], "flappy-"+agent.Name+":http").Status == api.HealthPassing, "not yet"
	})
	// Past the point where unhealthy_for would have fired, still the same PID.
	consistently(t, 5*time.Second, "flappy keeps its pid", func() (bool, string) {
		sc := supervisorCheck(c, "flappy", agent.Name)
		return sc != nil && supervisorPID(sc.Output) == flapPID, fmt.Sprint(sc)
	})
}

// Restarts are bounded: after `attempts` in `window` the service stays down,
// registered and critical with the reason. on-failure leaves a clean exit
// alone.
func TestRestartLimitsAndPolicies(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "crashy" {
  command = [%q, "-exit-after", "10ms", "-exit-code", "3"]
  restart {
    attempts = 2
    window   = "1m"
    delay    = "0s"
  }
}

service "oneshot" {
  command = [%q, "-exit-after", "10ms", "-exit-code", "0"]
}

service "never" {
  command = [%q, "-exit-after", "10ms", "-exit-code", "4"]
  restart {
    policy = "never"
  }
}
`, childBin, childBin, childBin))
	startMariposa(t, agent, nil, hcl)
	crashy := waitSupervisor(t, c, "crashy", agent.Name, api.HealthCritical, "failed: 2 restarts in 1m (last: exit 3)")
	waitSupervisor(t, c, "oneshot", agent.Name, api.HealthCritical, "completed (exit 0); not restarted (restart policy on-failure)")
	waitSupervisor(t, c, "never", agent.Name, api.HealthCritical, "exit 4; not restarted (restart policy never)")
	if r := instanceReport(t, crashy); r.Restarts != 2 || r.State != "failed" || r.LastExit != "exit 3" {
		t.Errorf("crashy: %+v, want failed after 2 restarts (3 runs), last exit 3", r)
	}
}

// args checks run under mariposa and report through TTL: 0 passing, 1
// warning, else critical. The agent has script checks disabled.
func TestArgsCheck(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	code := filepath.Join(t.TempDir(), "code")
	if err := os.WriteFile(code, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	hcl := writeHCL(t, fmt.Sprintf(`
service "scripted" {
  command = [%q]
  check "script" {
    args     = ["/bin/sh", "-c", "echo code $(cat %s); exit $(cat %s)"]
    interval = "200ms"
    timeout  = "2s"
  }
  restart {
    on_unhealthy = false
  }
}
`, childBin, code, code))
	startMariposa(t, agent, nil, hcl)
	id := "scripted-" + agent.Name + ":script"
	for _, step := range []struct{ code, status string }{{"0", api.HealthPassing}, {"1", api.HealthWarning}, {"2", api.HealthCritical}, {"0", api.HealthPassing}} {
		if err := os.WriteFile(code, []byte(step.code), 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "args check "+step.status, func() (bool, string) {
			for _, e := range serviceEntries(c, "scripted") {
				if ch := checkByID(e, id); ch != nil {
					return ch.Status == step.status, ch.Status + " " + ch.Output
				}
			}
			return false, "no check"
		})
	}
}

// Stopping: deregister first, then drain, then the stop signal to the
// group, then SIGKILL; nothing of the group survives.
func TestStopDrainsAndKillsTheGroup(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	pidsFile := filepath.Join(dir, "pids")
	hcl := writeHCL(t, fmt.Sprintf(`
service "stubborn" {
  command = [%q, "-ignore-term", "-grandchildren", "2", "-pids-file", %q]
  stop {
    drain   = "2s"
    timeout = "1s"
  }
}

service "pipes" {
  command = ["/bin/sh", "-c", "yes | tail & yes | tail"]
}
`, childBin, pidsFile))
	m := startMariposa(t, agent, nil, hcl)
	waitRunning(t, c, "stubborn", agent.Name)
	pipesPID := waitRunning(t, c, "pipes", agent.Name)
	pids := readPIDs(t, pidsFile)
	group := groupMembers(pipesPID)
	if len(group) < 4 {
		t.Fatalf("pipes group has %d processes, want the shell and two pipelines", len(group))
	}

	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	// During the drain: deregistered, process still running.
	waitFor(t, 5*time.Second, "deregistered during the drain", func() (bool, string) {
		return len(serviceEntries(c, "stubborn")) == 0, "still registered"
	})
	if !alive(pids[0]) {
		t.Fatal("process stopped before the drain ended")
	}
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		t.Fatal("mariposa did not exit")
	}
	if code := m.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, pid := range append(pids, group...) {
		if alive(pid) {
			t.Errorf("process %d survived the stop", pid)
		}
	}
	if out := m.out.String(); !strings.Contains(out, "stop timeout; killing the process group") {
		t.Errorf("no SIGKILL after the timeout in the log")
	}
}

// A leader stops in the same order: its mariposa stops contending first,
// which ends the term at once, but the drain is still served, and the lock
// stays held until the process is gone (the term goes back only after the
// stop and the deregistration).
func TestLeaderStopDrains(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	pidsFile := filepath.Join(t.TempDir(), "pids")
	const key = "mariposa/leader/drain"
	hcl := writeHCL(t, fmt.Sprintf(`
service "lead" {
  command = [%q, "-pids-file", %q]
  leader {
    key = %q
  }
  stop {
    drain = "2s"
  }
}
`, childBin, pidsFile, key))
	m := startMariposa(t, agent, nil, hcl)
	waitRunning(t, c, "lead", agent.Name)
	pid := readPIDs(t, pidsFile)[0]

	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 5*time.Second, "deregistered during the drain", func() (bool, string) {
		return len(serviceEntries(c, "lead")) == 0, "still registered"
	})
	if !alive(pid) {
		t.Fatal("the leader's process stopped before the drain ended")
	}
	kv, _, err := c.KV().Get(key, nil)
	if err != nil || kv == nil || kv.Session == "" {
		t.Fatalf("lock during the drain: %+v, %v; want it held", kv, err)
	}
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		t.Fatal("mariposa did not exit")
	}
	if alive(pid) {
		t.Fatal("the leader's process survived the stop")
	}
	if kv, _, err := c.KV().Get(key, nil); err != nil || (kv != nil && kv.Session != "") {
		t.Fatalf("lock after the stop: %+v, %v; want it released", kv, err)
	}
}

// A second SIGINT skips the drain and the stop timeout.
func TestSecondSignalKillsAtOnce(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "slow" {
  command = [%q, "-ignore-term"]
  stop {
    drain   = "30s"
    timeout = "30s"
  }
}
`, childBin))
	m := startMariposa(t, agent, nil, hcl)
	pid := waitRunning(t, c, "slow", agent.Name)
	_ = m.cmd.Process.Signal(syscall.SIGINT)
	// Deregistered first: the drain has begun.
	waitFor(t, 5*time.Second, "draining", func() (bool, string) {
		n := len(serviceEntries(c, "slow"))
		return n == 0 && alive(pid), fmt.Sprintf("%d registered", n)
	})
	_ = m.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a second SIGINT did not stop mariposa at once")
	}
	if alive(pid) {
		t.Fatalf("child %d alive", pid)
	}
}

// SIGHUP: changed services restart, unchanged keep their PID, removed stop
// and deregister, new start; invalid files change nothing.
func TestReload(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	svc := func(name, greeting string) string {
		return fmt.Sprintf("service %q {\n  command = [%q]\n  env = { GREETING = %q }\n}\n", name, childBin, greeting)
	}
	path := writeHCL(t, svc("a", "one")+svc("b", "one")+svc("gone", "one"))
	m := startMariposa(t, agent, nil, path)
	a1 := waitRunning(t, c, "a", agent.Name)
	b1 := waitRunning(t, c, "b", agent.Name)
	gone := waitRunning(t, c, "gone", agent.Name)

	if err := os.WriteFile(path, []byte(svc("a", "two")+svc("b", "one")+svc("new", "one")), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = m.cmd.Process.Signal(syscall.SIGHUP)
	a2 := waitRunning(t, c, "a", agent.Name, a1)
	waitRunning(t, c, "new", agent.Name)
	waitFor(t, 10*time.Second, "gone deregistered", func() (bool, string) {
		return len(serviceEntries(c, "gone")) == 0, "still there"
	})
	if alive(a1) || alive(gone) {
		t.Errorf("old processes alive: a %v gone %v", alive(a1), alive(gone))
	}
	if b := waitRunning(t, c, "b", agent.Name); b != b1 {
		t.Errorf("unchanged service b restarted: pid %d -> %d", b1, b)
	}

	// An invalid file: reported, nothing changes.
	if err := os.WriteFile(path, []byte(`service "a" { command = [] }`), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = m.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "reload failure in the log", func() (bool, string) {
		return strings.Contains(m.out.String(), "reload failed: the files have errors") &&
			strings.Contains(m.out.String(), "Empty command"), "not yet"
	})
	if got := waitRunning(t, c, "a", agent.Name); got != a2 {
		t.Errorf("a invalid reload restarted a: %d -> %d", a2, got)
	}
	if len(serviceEntries(c, "new")) != 1 || len(serviceEntries(c, "b")) != 1 {
		t.Error("an invalid reload changed the catalog")
	}
}

// groupMembers lists the live processes of process group pgid.
func groupMembers(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// Stopping many services at once leaves nothing behind: more services than
// the agent takes connections from one client (200 by default).
func TestStopManyLeavesNothing(t *testing.T) {
	t.Parallel()
	const n = 1000
	var up time.Duration
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "service \"many-%d\" {\n  command = [%q]\n  env     = { STAMP_SLEEP_MS = \"-1\" }\n}\n", i, stampBin)
	}
	start := time.Now()
	m := startMariposa(t, agent, nil, "-log-level", "info", writeHCL(t, sb.String()))
	defer func() {
		t.Logf("started in %s, stopped in %s", up.Round(time.Millisecond), time.Since(start.Add(up)).Round(time.Millisecond))
	}()
	// mariposa's liveness check must stay passing through the start:
	// registering a thousand services must not starve its heartbeat (the
	// session holding every lock of the node is bound to it).
	liveness := checks.SupervisorCheckID(checks.SupervisorServiceID(agent.Name))
	var critical string
	waitFor(t, 2*time.Minute, "every service registered and running", func() (bool, string) {
		if hc, _, err := c.Health().Checks("mariposa", nil); err == nil {
			for _, h := range hc {
				if h.CheckID == liveness && h.Status == api.HealthCritical && critical == "" {
					critical = h.Output
				}
			}
		}
		hc, _, err := c.Health().State(api.HealthPassing, &api.QueryOptions{Filter: `CheckID matches ":mariposa$"`})
		return err == nil && len(hc) == n+1, fmt.Sprint(len(hc), err)
	})
	up = time.Since(start)
	if critical != "" {
		t.Errorf("mariposa's liveness check went critical during the start (%q): its heartbeat was starved", critical)
	}
	if code := m.stop(t, syscall.SIGTERM, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	svcs, err := c.Agent().Services()
	if err != nil || len(svcs) != 0 {
		t.Fatalf("%d services left on the agent (%v)", len(svcs), err)
	}
}

// procStart is when a process started, after the machine's boot, from
// /proc/<pid>/stat (field 22, in clock ticks of 1/100 s); ok is false when
// the process is gone.
func procStart(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // f[0] is field 3
	if len(f) < 20 {
		return 0, false
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(ticks) * 10 * time.Millisecond, true
}
