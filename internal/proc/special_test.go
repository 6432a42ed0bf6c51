//go:build linux

package proc

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// statusOf reads /proc/<pid>/status and /proc/<pid>/limits.
func statusOf(t *testing.T, pid int) (status, limits string) {
	t.Helper()
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	l, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	return string(s), string(l)
}

func field(text, key string) string {
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// limitLine returns the soft and hard values of a /proc/<pid>/limits row.
func limitLine(limits, name string) string {
	for _, line := range strings.Split(limits, "\n") {
		if strings.HasPrefix(line, name) {
			f := strings.Fields(strings.TrimPrefix(line, name))
			if len(f) >= 2 {
				return f[0] + " " + f[1]
			}
		}
	}
	return ""
}

// TestUmaskNoNewPrivsRlimits: the child gets its umask, no_new_privs and
// rlimits; mariposa keeps its own umask, and a child that asked for none
// of it inherits mariposa's umask and can gain privileges (the fork
// threads' state does not leak into the others).
func TestUmaskNoNewPrivsRlimits(t *testing.T) {
	own := syscall.Umask(0o022)
	syscall.Umask(own)
	p, err := Start(Spec{Argv: []string{"sleep", "60"}, Umask: 0o027, HasUmask: true, NoNewPrivs: true,
		Rlimits: []Rlimit{{RlimitNOFile, 1000}, {RlimitCore, 0}, {RlimitNProc, 4000}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Signal(syscall.SIGKILL)
	st, lim := statusOf(t, p.Pid)
	if got := field(st, "Umask"); got != "0027" {
		t.Errorf("child umask %s, want 0027", got)
	}
	if got := field(st, "NoNewPrivs"); got != "1" {
		t.Errorf("child NoNewPrivs %s, want 1", got)
	}
	for name, want := range map[string]string{"Max open files": "1000 1000", "Max core file size": "0 0", "Max processes": "4000 4000"} {
		if got := limitLine(lim, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if now := syscall.Umask(own); now != own {
		t.Errorf("mariposa's umask changed from %04o to %04o", own, now)
	}

	// A plain child and a no_new_privs one without a umask: mariposa's.
	for _, nnp := range []bool{false, true} {
		q, err := Start(Spec{Argv: []string{"sleep", "60"}, NoNewPrivs: nnp})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := statusOf(t, q.Pid)
		_ = q.Signal(syscall.SIGKILL)
		if got, want := field(st, "Umask"), fmt.Sprintf("%04o", own); got != want {
			t.Errorf("nnp=%v: umask %s, want mariposa's %s", nnp, got, want)
		}
		if got, want := field(st, "NoNewPrivs"), map[bool]string{false: "0", true: "1"}[nnp]; got != want {
			t.Errorf("nnp=%v: NoNewPrivs %s", nnp, got)
		}
	}
}
