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
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/exepages"
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

// pageOutBinaries asks the kernel to page out the read-only mappings of
// each process's own binary (process_madvise MADV_PAGEOUT), waits for, and
// returns, in MB, how much of each binary is resident again: the pages the
// idle process touches in that time. The kernel maps a cached file in
// large folios (a fault maps the whole folio), so a binary's resident
// pages grow with its size more than with its use; this is its use. A
// process it cannot page out (no permission, an old kernel) gets -1.
func pageOutBinaries(wait time.Duration, pids ...int) []float64 {
	out := make([]float64, len(pids))
	exes := make([]string, len(pids))
	for i, pid := range pids {
		out[i] = -1
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue
		}
		exes[i] = exe
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		ok := true
		for _, m := range binaryMappings(pid, exe) {
			if m.Perms[1] == 'w' {
				continue
			}
			// A struct iovec of the other process's addresses: the
			// kernel reads it, nothing here touches that memory.
			iov := [2]uint64{uint64(m.Start), uint64(m.End - m.Start)}
			if _, _, errno := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(fd), uintptr(unsafe.Pointer(&iov)), 1, unix.MADV_PAGEOUT, 0, 0); errno != 0 {
				ok = false
			}
		}
		unix.Close(fd)
		if ok {
			out[i] = 0
		}
	}
	time.Sleep(wait) // the benchmark's measuring window, not a wait for a condition
	for i, pid := range pids {
		if out[i] < 0 {
			continue
		}
		for _, m := range binaryMappings(pid, exes[i]) {
			out[i] += float64(m.Rss) / 1024
		}
	}
	return out
}

// binaryMappings lists pid's mappings of the file exe, from its smaps.
func binaryMappings(pid int, exe string) []exepages.Mapping {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	return exepages.Parse(b, exe)
}

// TestIdleMariposaUnmapsItsStartPages: once the node has settled (15 s
// after the registration), mariposa unmaps the pages of its binary that its
// start left resident (website/running.md): the binary's read-only pages
// resident in it fall below half of what they were at the registration.
// What runs next maps what it needs again: the service killed after that
// is restarted, and so is the one an operator restarts through the control
// socket. Without the drop
// they stay at about 85 % of the binary and the wait times out.
func TestIdleMariposaUnmapsItsStartPages(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	m := startMariposa(t, agent, nil, writeHCL(t, fmt.Sprintf("service \"idle\" {\n  command = [%q]\n}\n", childBin)))
	pid := waitRunning(t, c, "idle", agent.Name)
	mpid := m.cmd.Process.Pid
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", mpid))
	if err != nil {
		t.Fatal(err)
	}
	readOnly := func() (kb int64) {
		for _, mp := range binaryMappings(mpid, exe) {
			if mp.Droppable() {
				kb += mp.Rss
			}
		}
		return kb
	}
	before := readOnly()
	if before == 0 {
		t.Fatalf("no read-only page of %s resident in mariposa (pid %d)", exe, mpid)
	}
	// The drop is followed at once by the idle loop mapping what it uses
	// again: the condition is polled often, and reads only smaps.
	least := before
	waitFor(t, 45*time.Second, "the binary's read-only pages resident in mariposa under half of those at the registration", func() (bool, string) {
		least = min(least, readOnly())
		return least < before/2, fmt.Sprintf("%d KB at the registration, at least %d KB since", before, least)
	})
	t.Logf("the binary's read-only pages resident: %d KB at the registration, %d KB at the least after, %d KB now", before, least, readOnly())

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pid = waitRunning(t, c, "idle", agent.Name, pid)
	if out, code := m.cli(t, "restart", "idle"); code != 0 {
		t.Fatalf("restart after the drop: exit %d: %s", code, out)
	}
	waitRunning(t, c, "idle", agent.Name, pid)
}
