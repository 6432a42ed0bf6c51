package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// memFigures is a process's memory as users compare it, in MB, from
// /proc/<pid>/smaps_rollup:
//
//   - rss: every page it has mapped in memory (its own, and the shared
//     ones: the binary's and the libraries' pages, in the page cache);
//   - pss: the same, each shared page divided by the number of processes
//     that map it (what it costs the machine, summed over processes);
//   - uss: the pages only it maps (Private_Clean + Private_Dirty): what
//     stopping it would give back. A file mapped by this process alone
//     (mariposa's own binary, when one mariposa runs) counts in it, as a
//     clean page the kernel may drop and read again;
//   - anon: the anonymous pages (heap, stacks, Go's runtime): the part of
//     uss that is not a file's.
type memFigures struct{ rss, pss, uss, anon float64 }

// smapsMB reads pid's smaps_rollup.
func smapsMB(pid int) memFigures {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	var m memFigures
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		mb := kb / 1024
		switch f[0] {
		case "Rss:":
			m.rss = mb
		case "Pss:":
			m.pss = mb
		case "Private_Clean:", "Private_Dirty:":
			m.uss += mb
		case "Anonymous:":
			m.anon = mb
		}
	}
	return m
}

// add adds x times w (a sample's weight in a mean).
func (m *memFigures) add(x memFigures, w float64) {
	m.rss += x.rss * w
	m.pss += x.pss * w
	m.uss += x.uss * w
	m.anon += x.anon * w
}

func (m memFigures) String() string {
	return fmt.Sprintf("RSS %.1f MB, PSS %.1f MB, USS %.1f MB (anonymous %.1f, pages of files only it maps %.1f)",
		m.rss, m.pss, m.uss, m.anon, m.uss-m.anon)
}

// startIdleGo starts the e2e tests' Go child with no flags (it waits for a
// signal): an idle Go program of a few MB of binary, the memory anchor of
// a Go supervisor. It is stopped with the benchmark.
func startIdleGo(b *testing.B) int {
	cmd := exec.Command(childBin)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// startIdleContainerPilot starts ContainerPilot ($MARIPOSA_CONTAINERPILOT_BIN)
// with n jobs, each the idle stamp child, against agent, and returns its
// PID once every child runs; 0 without the binary. The jobs have no port:
// ContainerPilot does not register them (mariposa registers its services
// and heartbeats a check each), so its figure is the supervising alone.
// It is stopped with the benchmark.
func startIdleContainerPilot(b *testing.B, agent string, n int) int {
	if containerPilotBin == "" {
		return 0
	}
	dir := b.TempDir()
	stamps := filepath.Join(dir, "stamps")
	var jobs []string
	for i := range n {
		jobs = append(jobs, fmt.Sprintf(`{"name": "idle-%d", "exec": [%q]}`, i, stampBin))
	}
	conf := fmt.Sprintf(`{"consul": %q, "logging": {"level": "WARN", "output": "stderr"}, "control": {"socket": %q}, "jobs": [%s]}`,
		agent, filepath.Join(dir, "cp.socket"), strings.Join(jobs, ", "))
	cfg := filepath.Join(dir, "containerpilot.json5")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(containerPilotBin, "-config", cfg)
	cmd.Env = append(os.Environ(), "STAMP_FILE="+stamps, "STAMP_SLEEP_MS=-1")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	waitFor(b, time.Minute, fmt.Sprintf("ContainerPilot's %d children", n), func() (bool, string) {
		got := countStarts(readStamps(stamps))
		return got >= n, fmt.Sprint(got)
	})
	return cmd.Process.Pid
}
