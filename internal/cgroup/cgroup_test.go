//go:build linux

package cgroup

import (
	"errors"
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

// open makes a manager under a parent of this test's own, or fails in CI
// and skips elsewhere where control groups cannot be made.
func open(t *testing.T) *Manager {
	t.Helper()
	m, err := Open(fmt.Sprintf("mariposa-cgroup-test-%d-%s", os.Getpid(), t.Name()))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("control groups unavailable: %v", err)
		}
		t.Skipf("control groups unavailable: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Remove(); err != nil {
			t.Errorf("removing the test's groups: %v", err)
		}
	})
	return m
}

// startIn starts a shell in g that daemonizes a sleep into a session of
// its own (setsid) and returns the shell and the stray's pid.
func startIn(t *testing.T, g *Group) (*exec.Cmd, int) {
	t.Helper()
	pidFile := t.TempDir() + "/stray"
	cmd := exec.Command("sh", "-c", "setsid sh -c 'echo $$ > "+pidFile+"; exec sleep 600' </dev/null >/dev/null 2>&1 & exec sleep 600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if fd := g.FD(); fd >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Place(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(pidFile)
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return cmd, n
		}
		if time.Now().After(deadline) {
			t.Fatal("the stray did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killAllTest: KillAll kills a setsid stray with its parent, the group is
// empty after it, and a child started in the group again after the kill
// runs (a group killed with cgroup.kill is made anew: see renew).
func killAllTest(t *testing.T, m *Manager) {
	g, err := m.Group("svc-n1", Resources{})
	if err != nil {
		t.Fatal(err)
	}
	cmd, stray := startIn(t, g)
	pids, err := g.Procs()
	if err != nil || len(pids) != 2 {
		t.Fatalf("group members %v (%v), want the shell and the stray", pids, err)
	}
	n, err := g.KillAll(5 * time.Second)
	if err != nil || n != 2 {
		t.Fatalf("KillAll: %d, %v", n, err)
	}
	_ = cmd.Wait()
	if err := syscall.Kill(stray, 0); err == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", stray)); !strings.Contains(string(st), ") Z ") {
			t.Fatalf("the stray %d survived KillAll", stray)
		}
	}
	if left, _ := g.Procs(); len(left) != 0 {
		t.Fatalf("left in the group: %v", left)
	}
	// Again in the same group: it runs.
	again := exec.Command("sleep", "0.2")
	if fd := g.FD(); fd >= 0 {
		again.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := again.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Place(again.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := again.Wait(); err != nil {
		t.Fatalf("a child started in the group after its kill: %v", err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// TestKillAllCgroup2: tracking and killing in the cgroup2 hierarchy.
func TestKillAllCgroup2(t *testing.T) {
	m := open(t)
	if m.unified == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no cgroup2 hierarchy here (CI has one mounted)")
		}
		t.Skip("no cgroup2 hierarchy here")
	}
	killAllTest(t, m)
}

// TestKillAllFreezer: tracking and killing with the v1 freezer, as on a
// host without any cgroup2 hierarchy.
func TestKillAllFreezer(t *testing.T) {
	m := open(t)
	if m.v1["freezer"] == "" {
		t.Skip("no v1 freezer here")
	}
	v1only := &Manager{v2ctl: map[string]bool{}, v1: m.v1}
	killAllTest(t, v1only)
}

// readFile returns what os.ReadFile would: the whole file past its first
// buffer, an empty file as empty, and a missing one as os.ErrNotExist
// (Procs takes a group removed from under it for stale by that).
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("12345\n", 1000)
	for name, content := range map[string]string{"big": big, "empty": "", "small": "0 1\n"} {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readFile(f)
		if err != nil || string(got) != content {
			t.Errorf("%s: %d bytes, %v; want %d bytes", name, len(got), err, len(content))
		}
	}
	_, err := readFile(filepath.Join(dir, "missing"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want os.ErrNotExist", err)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Path != filepath.Join(dir, "missing") {
		t.Errorf("missing file: %v, want an *os.PathError naming it", err)
	}
}

// TestEmpty: Empty tells, in one read of cgroup.events, whether a process
// is in the group: none before a start, one while it runs, none once it
// exited and was reaped; without cgroup2 it cannot tell.
func TestEmpty(t *testing.T) {
	m := open(t)
	if m.unified == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no cgroup2 hierarchy here (CI has one mounted)")
		}
		t.Skip("no cgroup2 hierarchy here")
	}
	g, err := m.Group("svc-empty", Resources{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Remove() }()
	want := func(empty bool) {
		t.Helper()
		if e, ok := g.Empty(); !ok || e != empty {
			t.Fatalf("Empty = %v, %v; want %v, true", e, ok, empty)
		}
	}
	want(true)
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.FD()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	want(false)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	want(true)
	if v1 := m.v1["freezer"]; v1 != "" {
		v1only := &Manager{v2ctl: map[string]bool{}, v1: m.v1}
		g1, err := v1only.Group("svc-empty-v1", Resources{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = g1.Remove() }()
		if _, ok := g1.Empty(); ok {
			t.Fatal("Empty told without cgroup2")
		}
	}
}
