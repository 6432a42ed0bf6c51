package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// cgroupFile is a file of the control group pid is in: the v1 hierarchy of
// controller where it is mounted, else the cgroup2 one.
func cgroupFile(t *testing.T, pid int, controller, v1file, v2file string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	v2 := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				if p := filepath.Join("/sys/fs/cgroup", parts[1], parts[2], v1file); fileExists(p) {
					return p
				}
			}
		}
		if parts[1] == "" {
			v2 = parts[2]
		}
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if p := filepath.Join(root, v2, v2file); fileExists(p) {
			return p
		}
	}
	t.Fatalf("pid %d has no %s control group file:\n%s", pid, controller, b)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// cpuUsage is the CPU time the control group of pid used.
func cpuUsage(t *testing.T, pid int) time.Duration {
	t.Helper()
	p := cgroupFile(t, pid, "cpuacct", "cpuacct.usage", "cpu.stat")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(p, "cpuacct.usage") {
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(n)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return time.Duration(n) * time.Microsecond
		}
	}
	t.Fatalf("%s has no usage_usec", p)
	return 0
}

// TestResourceLimits: a memory hog with memory = 64 is OOM-killed, shown as
// oom-killed in its supervisor check, status and metrics, and restarted
// by its policy; a busy loop with cpu = 250 gets about a quarter of a core
// (by its control group's own usage); a fork bomb with pids = 64 is held at
// 64 processes.
func TestResourceLimits(t *testing.T) {
	t.Parallel()
	needCgroups(t)
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, `
service "hog" {
  command = ["sh", "-c", "x=0123456789abcdef; while :; do x=$x$x; done"]
  resources { memory = 64 }
  restart {
    policy = "always"
    delay  = "200ms"
  }
}

service "busy" {
  command = ["sh", "-c", "while :; do :; done"]
  resources { cpu = 250 }
}

service "bomb" {
  # bash, not sh: a fork that fails is retried and then skipped, where dash
  # would exit.
  command = ["bash", "-c", "for i in $(seq 200); do sleep 600 & done 2>/dev/null; wait"]
  resources { pids = 64 }
  stop { timeout = "1s" }
}
`)
	m := startMariposa(t, agent, nil, "-http-addr", "127.0.0.1:0", hcl)

	// The hog: oom-killed, said so, restarted.
	waitSupervisor(t, c, "hog", agent.Name, "critical", "after oom-killed")
	base := apiURL(t, c, agent.Name)
	waitFor(t, 30*time.Second, "oom-killed restarts in /metrics", func() (bool, string) {
		r := sample(scrape(t, base, ""), "mariposa_restarts_total", map[string]string{"service": "hog", "reason": "oom-killed"})
		return r >= 1, fmt.Sprintf("restarts for oom-killed: %v", r)
	})
	waitFor(t, 30*time.Second, "status shows oom-killed", func() (bool, string) {
		out, _ := m.cli(t, "status", "-consul-addr", agent.HTTPAddr(), "hog")
		return strings.Contains(out, "oom-killed"), out
	})

	// The busy loop: a quarter of a core, measured by its group (on a
	// loaded machine it may get less anyway: its group's quota is read too).
	pid := waitRunning(t, c, "busy", agent.Name)
	quota := cgroupFile(t, pid, "cpu", "cpu.cfs_quota_us", "cpu.max")
	if b, _ := os.ReadFile(quota); !strings.HasPrefix(strings.TrimSpace(string(b)), "25000") {
		t.Errorf("%s: %q, want a quota of 25000 per 100000", quota, b)
	}
	u0, t0 := cpuUsage(t, pid), time.Now()
	time.Sleep(3 * time.Second) // a resource measure over a window, not a wait for a condition
	used, wall := cpuUsage(t, pid)-u0, time.Since(t0)
	if cores := used.Seconds() / wall.Seconds(); cores > 0.35 || cores < 0.05 {
		t.Errorf("busy with cpu = 250 used %.2f cores (%s of CPU in %s)", cores, used, wall)
	}

	// The fork bomb: held at 64.
	pid = waitRunning(t, c, "bomb", agent.Name)
	pidsCurrent := cgroupFile(t, pid, "pids", "pids.current", "pids.current")
	waitFor(t, 20*time.Second, "the bomb at its limit", func() (bool, string) {
		b, _ := os.ReadFile(pidsCurrent)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n == 64, fmt.Sprintf("pids.current %d", n)
	})
	consistently(t, time.Second, "the bomb held at 64", func() (bool, string) {
		b, _ := os.ReadFile(pidsCurrent)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n <= 64, fmt.Sprintf("pids.current %d", n)
	})
	// mariposa still answers (the node stays responsive).
	if out, code := m.cli(t, "status", "-consul-addr", agent.HTTPAddr()); code != 0 {
		t.Fatalf("status: exit %d: %s", code, out)
	}
}
