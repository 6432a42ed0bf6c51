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
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/schema"
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

// A run cut short because the service stops is not a result: the check must
// not turn critical ("killed by SIGKILL") on its way out.
func TestScriptCheckStopReportsNothing(t *testing.T) {
	client, err := api.NewClient(api.DefaultConfig()) // never called: Run is not started
	if err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(client, "n1", "127.0.0.1", hclog.NewNullLogger(), time.Minute)
	reg.Register(&api.AgentServiceRegistration{ID: "svc", Checks: api.AgentServiceChecks{{CheckID: "svc:mariposa", TTL: "1m"}}},
		Result{Health: api.HealthPassing})
	started := filepath.Join(t.TempDir(), "started")
	sc := &ScriptCheck{ServiceID: "svc", Registry: reg, Log: hclog.NewNullLogger(), Check: &schema.Check{
		Name: "slow", Kind: schema.CheckArgs, Args: []string{"sh", "-c", "touch " + started + "; sleep 30"},
		Interval: time.Second, Timeout: time.Minute}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sc.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(started); err != nil; _, err = os.Stat(started) {
		if time.Now().After(deadline) {
			t.Fatal("the check never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if tc := reg.entries["svc"].ttls["svc:slow"]; tc != nil {
		t.Fatalf("a run cut short by the stop was reported: %+v", tc.st)
	}
}

// An args check's local streak: it starts with the first passing result
// about the current process, holds while results pass, ends on any other,
// and a result that ended while a Kick was pending (a process started
// during the run) starts nothing.
func TestLocalStreak(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	pass, warn, crit := Result{Health: api.HealthPassing}, Result{Health: api.HealthWarning}, Result{Health: api.HealthCritical}
	var zero time.Time
	for _, tc := range []struct {
		name   string
		since  time.Time
		st     Result
		kicked bool
		want   time.Time
	}{
		{"first pass: the streak starts at its end", zero, pass, false, t0},
		{"another pass: the streak holds", t0.Add(-time.Second), pass, false, t0.Add(-time.Second)},
		{"critical: no streak", t0.Add(-time.Second), crit, false, zero},
		{"warning is not passing", t0.Add(-time.Second), warn, false, zero},
		{"a pass while a process started: not about it", zero, pass, true, zero},
		{"a pass while a process started ends the streak too", t0.Add(-time.Second), pass, true, zero},
	} {
		if got := localStreak(tc.since, tc.st, t0, tc.kicked); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
