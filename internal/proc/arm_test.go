//go:build linux

package proc

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mainThreadChildren lists the children the main thread forked (its own
// children list: /proc/PID/task/PID/children).
func mainThreadChildren(t *testing.T) []int {
	t.Helper()
	pid := os.Getpid()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// TestArmedExitStartsSuccessorOnMainThread: an armed child's exit is
// reaped by the main thread, which forks the successor there at once (so
// an upgrade's exec from that thread keeps it, as every other child); the
// exit and the successor come back together. A clean exit under
// FailureOnly, a held arm, a disarmed one and a successor not Ready start
// nothing: the exit is reported alone.
func TestArmedExitStartsSuccessorOnMainThread(t *testing.T) {
	if !onMain() {
		t.Fatal("the test binary does not serve forks on its main thread (TestMain)")
	}
	succ := Spec{Argv: []string{"sleep", "60"}}
	for _, c := range []struct {
		name   string
		code   int
		s      Successor
		before func(p *Process) // after Arm, before the exit
		fires  bool
	}{
		{name: "failure", code: 3, s: Successor{Spec: succ}, fires: true},
		{name: "clean exit, any status", code: 0, s: Successor{Spec: succ}, fires: true},
		{name: "clean exit, failures only", code: 0, s: Successor{Spec: succ, FailureOnly: true}},
		{name: "failure, failures only", code: 4, s: Successor{Spec: succ, FailureOnly: true}, fires: true},
		{name: "held", code: 3, s: Successor{Spec: succ}, before: func(p *Process) {
			if p.Hold() {
				t.Fatal("fired before the exit")
			}
		}},
		{name: "held and released", code: 3, s: Successor{Spec: succ}, before: func(p *Process) { p.Hold(); p.Release() }, fires: true},
		{name: "disarmed", code: 3, s: Successor{Spec: succ}, before: func(p *Process) {
			if p.Disarm() {
				t.Fatal("fired before the exit")
			}
		}},
		{name: "not ready", code: 3, s: Successor{Spec: succ, Ready: func() bool { return false }}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Start(Spec{Argv: []string{"sh", "-c", fmt.Sprintf("sleep 0.3; exit %d", c.code)}})
			if err != nil {
				t.Fatal(err)
			}
			if !p.Arm(&c.s) {
				t.Fatal("not armed")
			}
			if c.before != nil {
				c.before(p)
			}
			select {
			case <-p.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("no exit")
			}
			if e := p.Exit(); e.Code != c.code {
				t.Fatalf("exit %s, want %d", e, c.code)
			}
			next, fired, err := p.Next()
			if fired != c.fires {
				t.Fatalf("successor fired %v, want %v (%v)", fired, c.fires, err)
			}
			if !fired {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = next.Signal(syscall.SIGKILL); <-next.Done() }()
			if kids := mainThreadChildren(t); !slices.Contains(kids, next.Pid) {
				t.Fatalf("successor %d is not the main thread's child (its children: %v)", next.Pid, kids)
			}
			if syscall.Kill(next.Pid, 0) != nil {
				t.Fatal("successor not running")
			}
		})
	}
}
