package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestRestartsForkedOnMainThread: every restart is forked by mariposa's
// main thread, the one an upgrade in place re-execs from (a child's
// parent-death signal follows the thread that forked it, and the exec
// ends every other thread): the restart at once (delay 0, the main
// thread forks it at the exit: proc.Process.Arm) and the restart after a
// backoff (the supervisor's start, a request to the main thread) alike.
// Each restarted child must be in the main thread's own children list
// (/proc/PID/task/PID/children), not another thread's.
func TestRestartsForkedOnMainThread(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	dir := t.TempDir()
	stamps := map[string]string{"fast": filepath.Join(dir, "fast"), "slow": filepath.Join(dir, "slow")}
	hcl := writeHCL(t, fmt.Sprintf(`
service "fast" {
  command = [%q]
  env     = { STAMP_FILE = %q, STAMP_SLEEP_MS = "300", STAMP_EXIT = "1" }
  restart {
    policy   = "always"
    delay    = "0s"
    attempts = 0
  }
}

service "slow" {
  command = [%q]
  env     = { STAMP_FILE = %q, STAMP_SLEEP_MS = "300", STAMP_EXIT = "1" }
  restart {
    policy   = "always"
    delay    = "20ms"
    attempts = 0
  }
}
`, stampBin, stamps["fast"], stampBin, stamps["slow"]))
	m := startMariposa(t, agent, nil, "-log-level", "warn", hcl)
	mpid := m.cmd.Process.Pid
	for _, svc := range []string{"fast", "slow"} {
		onMain := map[int]bool{}
		waitFor(t, 2*time.Minute, svc+": 3 restarted children seen, each forked by the main thread", func() (bool, string) {
			st := readStamps(stamps[svc])
			// The running child: the last start, if no stop follows it;
			// the first run is no restart.
			var starts []int
			running := 0
			for _, s := range st {
				switch s.what {
				case "start":
					starts = append(starts, s.pid)
					running = s.pid
				case "stop":
					running = 0
				}
			}
			if running == 0 || len(starts) < 2 {
				return false, fmt.Sprintf("%d starts", len(starts))
			}
			if threadChildren(mpid, mpid, running) {
				onMain[running] = true
			} else if slices.Contains(children(mpid), running) {
				t.Fatalf("%s: restarted child %d was forked by a thread other than the main thread", svc, running)
			}
			return len(onMain) >= 3, fmt.Sprintf("%d starts; seen on the main thread: %v", len(starts), onMain)
		})
	}
}

// threadChildren reports whether child is among the children of pid's
// thread tid.
func threadChildren(pid, tid, child int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, tid))
	for _, f := range strings.Fields(string(b)) {
		if n, _ := strconv.Atoi(f); n == child {
			return true
		}
	}
	return false
}

// TestRestartAtOnceKeepsEachRunsStderr: a process restarted at once (the
// main thread forks the next at the exit, before the supervisor hears of
// it) has its exit reported with its own last stderr line, not the line
// its successor may already have written: each run writes its PID to
// stderr, and each exited event must carry the PID it is about.
func TestRestartAtOnceKeepsEachRunsStderr(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	m := startMariposa(t, agent, nil, "-log-level", "warn", writeHCL(t, `
service "noisy" {
  command = ["sh", "-c", "echo \"run $$\" >&2; sleep 0.2; exit 3"]
  restart {
    delay    = "0s"
    attempts = 0
  }
}
`))
	// A run's exit is recorded after its start, whose reason names its PID.
	type record struct {
		Action string `json:"action"`
		Reason string `json:"reason"`
	}
	waitFor(t, 2*time.Minute, "5 exits, each with its own stderr line", func() (bool, string) {
		out, code := m.cli(t, "events", "-consul-addr", agent.HTTPAddr(), "-local", "-service", "noisy", "-json")
		if code != 0 {
			return false, out
		}
		exits, pid := 0, 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var r record
			if json.Unmarshal([]byte(line), &r) != nil {
				continue
			}
			switch r.Action {
			case "started":
				if _, err := fmt.Sscanf(r.Reason, "running (pid %d", &pid); err != nil {
					t.Fatalf("started: reason %q", r.Reason)
				}
			case "exited":
				if want := fmt.Sprintf(`exit 3; last stderr: "run %d"`, pid); pid != 0 && r.Reason != want {
					t.Fatalf("exit of pid %d: reason %q, want %q", pid, r.Reason, want)
				}
				exits++
			}
		}
		return exits >= 5, out
	})
}
