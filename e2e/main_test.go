// Package e2e runs the mariposa binary against real Consul agents and
// asserts what a user would see: the catalog, health, DNS, processes, files.
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/cgroup"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/report"
)

var (
	mariposaBin string
	childBin    string
	stampBin    string
	stampKind   = "Go"
	rawLoopBin  string // testdata/rawloop.c where a compiler exists: the restart's floor
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mariposa-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mariposaBin = filepath.Join(dir, "mariposa")
	childBin = filepath.Join(dir, "testchild")
	stampBin = filepath.Join(dir, "stampchild")
	for out, pkg := range map[string]string{mariposaBin: "..", childBin: "../internal/testchild", stampBin: "../internal/stampchild"} {
		args := []string{"build", "-o", out}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if !raceEnabled {
			// Static, as make build and make release build it (the race
			// detector needs cgo): the benchmarks measure what users run,
			// without the C library's pages in its memory.
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", pkg, err)
			os.Exit(1)
		}
	}
	// The benchmarks' tiny child: the C one where a compiler exists.
	// Static where the C library allows it: no dynamic loading at exec.
	if cc, err := exec.LookPath("cc"); err == nil {
		for _, kind := range []string{"static C", "C"} {
			args := []string{"-O2", "-o", stampBin, "testdata/stampchild.c"}
			if kind == "static C" {
				args = append([]string{"-static"}, args...)
			}
			if out, err := exec.Command(cc, args...).CombinedOutput(); err == nil {
				stampKind = kind
				break
			} else if kind == "C" {
				fmt.Fprintf(os.Stderr, "building the C stamp child failed; using the Go one: %v\n%s", err, out)
			}
		}
	}
	// The mariposas of this run keep their control groups apart from those
	// of other test binaries running at once (same service IDs).
	cgParent := fmt.Sprintf("mariposa-e2e-%d", os.Getpid())
	os.Setenv("MARIPOSA_CGROUP_PARENT", cgParent)
	// The floor of BenchmarkRestartAfterExit, where a compiler exists.
	if cc, err := exec.LookPath("cc"); err == nil {
		bin := filepath.Join(dir, "rawloop")
		for _, static := range []bool{true, false} {
			args := []string{"-O2", "-o", bin, "testdata/rawloop.c"}
			if static {
				args = append([]string{"-static"}, args...)
			}
			if exec.Command(cc, args...).Run() == nil {
				rawLoopBin = bin
				break
			}
		}
	}
	code := m.Run()
	removeCgroupParent(cgParent)
	os.RemoveAll(dir)
	os.Exit(code)
}

// lockedBuffer collects mariposa's output for assertions and failure logs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mariposa is one running `mariposa run`.
type mariposa struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
	sock string // its control socket
}

// controlSocket is a fresh control socket path (short: a UNIX socket path
// has a 108-byte limit, and t.TempDir's can be long).
func controlSocket(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

// cli runs a mariposa command against m's control socket and returns its
// output and exit code.
func (m *mariposa) cli(t testing.TB, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(mariposaBin, args...)
	cmd.Env = append(os.Environ(), "MARIPOSA_CONTROL_SOCKET="+m.sock)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// writeHCL writes the service file into a fresh directory and returns its
// path.
func writeHCL(t testing.TB, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "services.hcl")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startMariposa runs `mariposa run` against agent with the given files.
func startMariposa(t testing.TB, agent *consultest.Agent, env []string, args ...string) *mariposa {
	t.Helper()
	return startMariposaBin(t, mariposaBin, agent, env, args...)
}

// startMariposaBin is startMariposa with the binary at bin.
func startMariposaBin(t testing.TB, bin string, agent *consultest.Agent, env []string, args ...string) *mariposa {
	t.Helper()
	full := append([]string{"run", "-consul-addr", agent.HTTPAddr(), "-log-level", "debug"}, args...)
	cmd := exec.Command(bin, full...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// Each mariposa its own control socket: tests run many side by side.
	sock := controlSocket(t)
	cmd.Env = append(append(os.Environ(), "MARIPOSA_CONTROL_SOCKET="+sock), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mariposa{cmd: cmd, out: out, done: make(chan struct{}), sock: sock}
	go func() { m.err = cmd.Wait(); close(m.done) }()
	t.Cleanup(func() {
		if !m.exited() {
			_ = cmd.Process.Kill()
			<-m.done
		}
		if t.Failed() {
			t.Logf("mariposa output:\n%s", out.String())
		}
	})
	return m
}

func (m *mariposa) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits for mariposa to exit, returning its exit code.
func (m *mariposa) stop(t testing.TB, sig syscall.Signal, timeout time.Duration) int {
	t.Helper()
	_ = m.cmd.Process.Signal(sig)
	select {
	case <-m.done:
	case <-time.After(timeout):
		t.Fatalf("mariposa did not exit within %s of %s", timeout, sig)
	}
	return m.cmd.ProcessState.ExitCode()
}

// waitFor fails the test unless cond holds before the deadline; describe
// says what was last seen.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	if !consultest.WaitFor(timeout, func() bool {
		ok, seen := cond()
		last = seen
		return ok
	}) {
		t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
	}
}

// serviceEntries returns the health entries of a service (any status).
func serviceEntries(c *api.Client, name string) []*api.ServiceEntry {
	es, _, err := c.Health().Service(name, "", false, nil)
	if err != nil {
		return nil
	}
	return es
}

func checkByID(e *api.ServiceEntry, id string) *api.HealthCheck {
	for _, c := range e.Checks {
		if c.CheckID == id {
			return c
		}
	}
	return nil
}

// supervisorPID parses "running (pid N)" from the supervisor check output.
// supervisorPID is the PID of the running process, from the state the
// supervisor check carries as data (internal/report); 0 unless running.
func supervisorPID(out string) int {
	if r, ok := report.Decode(out); ok && r.State == "running" {
		return r.PID
	}
	return 0
}

// instanceReport is the instance's state as data, from its supervisor
// check's output.
func instanceReport(t testing.TB, sc *api.HealthCheck) report.Instance {
	t.Helper()
	if sc == nil {
		t.Fatal("no supervisor check")
	}
	r, ok := report.Decode(sc.Output)
	if !ok {
		t.Fatalf("the supervisor check carries no state: %q", sc.Output)
	}
	return r
}

func freePort(t testing.TB) int { return consultest.FreePorts(t, 1)[0] }

// removeCgroupParent removes the control groups this run's mariposas made.
func removeCgroupParent(name string) {
	if m, err := cgroup.Open(name); err == nil {
		if err := m.Remove(); err != nil {
			fmt.Fprintln(os.Stderr, "removing the test run's control groups:", err)
		}
	}
}
