package proc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("\x00\x01\x02 not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		// Before: "fork/exec /usr/bin/sleep: no such file or directory".
		{"missing dir", Spec{Argv: []string{"sleep", "1"}, Dir: filepath.Join(dir, "nope")}, "working directory " + filepath.Join(dir, "nope") + " does not exist"},
		{"dir is a file", Spec{Argv: []string{"sleep", "1"}, Dir: file}, "is not a directory"},
		{"not in PATH", Spec{Argv: []string{"no-such-program-xyz"}}, `command "no-such-program-xyz" not found in PATH`},
		{"missing path", Spec{Argv: []string{"/opt/nothing/here"}}, "command /opt/nothing/here does not exist"},
		{"relative to dir", Spec{Argv: []string{"./bin/app"}, Dir: dir}, "command " + filepath.Join(dir, "bin/app") + " does not exist"},
		{"not executable", Spec{Argv: []string{notExec}}, "is not executable"},
		{"exec format", Spec{Argv: []string{garbage}}, "exec format error"},
		{"empty", Spec{Argv: []string{""}}, "empty command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start(tc.spec)
			if err == nil {
				p.Signal(9)
				p.Exit()
				t.Fatal("started")
			}
			var se *StartError
			if !errors.As(err, &se) || !se.Permanent {
				t.Fatalf("error %v (%T) is not a permanent StartError", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestSignalMainSparesTheGroup(t *testing.T) {
	// A wrapper script with a helper: a reload signal goes to the wrapper,
	// and the helper lives on.
	lines := make(chan Line, 16)
	p, err := Start(Spec{Argv: []string{"sh", "-c", `trap 'echo got-hup' HUP; sleep 30 & echo helper $!; while :; do sleep 0.02; done`},
		Tap: func(l Line) { lines <- l }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Signal(syscall.SIGKILL); p.Exit() }()
	next := func() string {
		select {
		case l := <-lines:
			return l.Text
		case <-time.After(5 * time.Second):
			t.Fatal("no output")
			return ""
		}
	}
	var helper int
	if _, err := fmt.Sscanf(next(), "helper %d", &helper); err != nil {
		t.Fatal(err)
	}
	// Until the helper has exec'd sleep it is a copy of the shell, with its
	// trap: a signal then would be the trap's, and sleep would never see it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", helper))
		if strings.HasPrefix(string(b), "sleep\x00") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the helper %d never became sleep: %q", helper, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.SignalMain(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "got-hup" {
		t.Fatalf("wrapper printed %q", got)
	}
	if !living(helper) {
		t.Fatal("the helper died with the wrapper's reload signal")
	}
	// Mutation: the group signal kills the helper (sleep dies of SIGHUP;
	// the shell may not reap it at once, so a zombie counts as dead).
	_ = p.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(5 * time.Second)
	for living(helper) {
		if time.Now().After(deadline) {
			t.Fatal("a group signal did not reach the helper: the test cannot tell the two apart")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// living: the process exists and is not a zombie.
func living(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}
