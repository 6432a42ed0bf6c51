package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// pidsWithCmdline lists the processes whose command line is exactly argv.
func pidsWithCmdline(argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(b) == want {
			if st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); !strings.Contains(string(st), ") Z ") {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// needCgroups fails (in CI) or skips unless this machine lets mariposa make
// control groups: root and a writable hierarchy.
func needCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		if _, err := os.Stat("/sys/fs/cgroup"); err == nil {
			return
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("control group tests need root and /sys/fs/cgroup")
	}
	t.Skip("control group tests need root and /sys/fs/cgroup")
}

// TestCgroupNothingEscapes: a service that daemonizes a grandchild into a
// session of its own (setsid: the process-group kill and the parent-death
// signal both miss it) leaves nothing behind after a restart, after a
// SIGKILL of mariposa followed by a new mariposa, nor after the stop.
func TestCgroupNothingEscapes(t *testing.T) {
	t.Parallel()
	needCgroups(t)
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	n := 900000 + rand.IntN(99999)
	stray, main := []string{"sleep", strconv.Itoa(n)}, []string{"sleep", strconv.Itoa(n + 1)}
	hcl := writeHCL(t, fmt.Sprintf(`
service "escape" {
  command = ["sh", "-c", "setsid sh -c 'exec sleep %d' </dev/null >/dev/null 2>&1 & exec sleep %d"]
  stop { timeout = "1s" }
}
`, n, n+1))
	oneStray := func(not ...int) int {
		t.Helper()
		var got []int
		waitFor(t, 20*time.Second, "exactly one new stray", func() (bool, string) {
			got = pidsWithCmdline(stray...)
			for _, old := range not {
				for _, p := range got {
					if p == old {
						return false, fmt.Sprintf("old stray %d still there: %v", old, got)
					}
				}
			}
			return len(got) == 1, fmt.Sprintf("strays %v", got)
		})
		return got[0]
	}

	m := startMariposa(t, agent, nil, hcl)
	pid := waitRunning(t, c, "escape", agent.Name)
	s1 := oneStray()
	if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s1)); !strings.Contains(string(cg), "/"+agent.Name+".escape-"+agent.Name) {
		t.Fatalf("the stray is not in the instance's control group:\n%s", cg)
	}

	// A restart never runs beside the stray: it is killed first.
	if out, code := m.cli(t, "restart", "escape"); code != 0 {
		t.Fatalf("restart: exit %d: %s", code, out)
	}
	pid = waitRunning(t, c, "escape", agent.Name, pid)
	s2 := oneStray(s1)

	// mariposa SIGKILLed: its child dies with it (parent-death signal),
	// the stray does not; the next mariposa finds it in the instance's
	// control group and kills it before it starts the service again.
	_ = m.cmd.Process.Kill()
	<-m.done
	waitFor(t, 10*time.Second, "the main process dead with mariposa", func() (bool, string) {
		return !alive(pid), fmt.Sprintf("pid %d alive", pid)
	})
	if !alive(s2) {
		t.Fatalf("the stray %d died with mariposa: the test shows nothing", s2)
	}
	m = startMariposa(t, agent, nil, hcl)
	waitRunning(t, c, "escape", agent.Name, pid)
	s3 := oneStray(s2)
	if alive(s2) {
		t.Fatalf("the previous run's stray %d is alive beside the new start (%d)", s2, s3)
	}

	// The stop: nothing is left.
	if code := m.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("mariposa exited %d", code)
	}
	waitFor(t, 10*time.Second, "nothing left after the stop", func() (bool, string) {
		s, mn := pidsWithCmdline(stray...), pidsWithCmdline(main...)
		return len(s)+len(mn) == 0, fmt.Sprintf("strays %v, main %v", s, mn)
	})
}
