package checks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func TestRunScript(t *testing.T) {
	cases := []struct {
		script string
		health string
		output string
	}{
		{"echo fine", api.HealthPassing, "fine"},
		{"echo meh; exit 1", api.HealthWarning, "meh"},
		{"echo bad >&2; exit 2", api.HealthCritical, "exit 2\nbad"},
		{"kill -9 $$", api.HealthCritical, "killed by SIGKILL"},
	}
	for _, c := range cases {
		st := RunScript(context.Background(), []string{"sh", "-c", c.script}, nil, "", 5*time.Second)
		if st.Health != c.health || st.Output != c.output {
			t.Errorf("%q: %+v, want %s %q", c.script, st, c.health, c.output)
		}
	}
	if st := RunScript(context.Background(), []string{"/nonexistent"}, nil, "", time.Second); st.Health != api.HealthCritical || !strings.Contains(st.Output, "could not start") {
		t.Errorf("missing program: %+v", st)
	}
}

// A check that outlives its timeout is critical, and its whole process
// group is killed, grandchildren included.
func TestRunScriptTimeoutKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	st := RunScript(context.Background(), []string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"}, nil, "", 300*time.Millisecond)
	if st.Health != api.HealthCritical || !strings.HasPrefix(st.Output, "timed out after 300ms") {
		t.Fatalf("status %+v", st)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("timeout not enforced")
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, c := range strings.TrimSpace(string(b)) {
		pid = pid*10 + int(c-'0')
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d survived the check's timeout", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunScriptOutputCapped(t *testing.T) {
	st := RunScript(context.Background(), []string{"sh", "-c", "yes | head -c 100000"}, nil, "", 5*time.Second)
	if len(st.Output) > maxScriptOutput {
		t.Fatalf("output %d bytes", len(st.Output))
	}
}
