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

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// As PID 1 (a container's init) mariposa reaps re-parented orphans, keeps
// the exit statuses of its own children, and forwards SIGUSR1/SIGUSR2.
func TestPID1ReapsOrphansAndForwardsSignals(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("unshare")
	consultest.Require(t, err == nil, "unshare not installed (util-linux)")
	consultest.Require(t, os.Geteuid() == 0, "PID namespaces need root here")
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	pidsFile := filepath.Join(dir, "pids")
	masksFile := filepath.Join(dir, "masks")
	// The shell leaves orphans behind (subshells whose sleeps outlive them),
	// which become mariposa's children, then execs the test child.
	hcl := writeHCL(t, fmt.Sprintf(`
service "init" {
  command = ["/bin/sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status > %s; for i in 1 2 3 4 5; do (sleep 0.$i &); done; exec %s -pids-file %s"]
  restart {
    delay = "0s"
  }
}
`, masksFile, childBin, pidsFile))
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", mariposaBin, "run",
		"-consul-addr", agent.HTTPAddr(), "-log-level", "debug", "-control-socket", controlSocket(t), hcl)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var mpid int // mariposa's PID outside the namespace
	t.Cleanup(func() {
		if mpid > 0 {
			syscall.Kill(mpid, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("mariposa output:\n%s", out.String())
		}
	})
	waitFor(t, 10*time.Second, "mariposa in its namespace", func() (bool, string) {
		kids := children(cmd.Process.Pid)
		if len(kids) == 1 {
			mpid = kids[0]
		}
		return mpid > 0, fmt.Sprint(kids)
	})
	waitFor(t, 10*time.Second, "mariposa says it is PID 1", func() (bool, string) {
		return strings.Contains(out.String(), "running as PID 1"), "not yet"
	})
	pid := waitRunning(t, c, "init", agent.Name) // as seen inside the namespace
	_ = pid
	hostPID := readPIDs(t, pidsFile)[0] // testchild writes os.Getpid(): also namespaced
	_ = hostPID

	// The orphaned sleeps exit within a second; none may stay a zombie.
	waitFor(t, 10*time.Second, "orphans reaped", func() (bool, string) {
		z := zombieChildren(mpid)
		return len(z) == 0 && len(children(mpid)) == 1, fmt.Sprintf("zombies %v, children %v", z, children(mpid))
	})

	// SIGUSR1 reaches the child.
	_ = syscall.Kill(mpid, syscall.SIGUSR1)
	waitFor(t, 10*time.Second, "SIGUSR1 forwarded", func() (bool, string) {
		return strings.Contains(out.String(), "got user defined signal 1"), "not yet"
	})

	// The child starts with a clean signal mask: nothing blocked, nothing
	// ignored (read by a non-Go process: Go's runtime blocks signals on its
	// own threads).
	b, err := os.ReadFile(masksFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"; string(b) != want {
		t.Errorf("child signal masks:\n%s\nwant\n%s", b, want)
	}
	child := children(mpid)[0]

	// mariposa still gets its own child's exit status: kill it and the
	// restart names the signal.
	_ = syscall.Kill(child, syscall.SIGKILL)
	waitSupervisor(t, c, "init", agent.Name, "passing", "restarted 1 time, last after killed by SIGKILL")
	waitFor(t, 10*time.Second, "orphans of the second run reaped", func() (bool, string) {
		z := zombieChildren(mpid)
		return len(z) == 0 && len(children(mpid)) == 1, fmt.Sprintf("zombies %v", z)
	})

	_ = syscall.Kill(mpid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("mariposa as PID 1 did not stop")
	}
	if len(serviceEntries(c, "init")) != 0 {
		t.Error("still registered")
	}
}

// children lists the PIDs whose parent is pid.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
	}
	return out
}

// zombieChildren lists pid's children in state Z.
func zombieChildren(pid int) []int {
	var out []int
	for _, c := range children(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'Z' {
			out = append(out, c)
		}
	}
	return out
}
