package supervisor

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/schema"
)

func restartCfg(mod func(*schema.Restart)) schema.Restart {
	r := schema.Restart{Policy: schema.RestartOnFailure, Attempts: 10, Window: 5 * time.Minute,
		Delay: time.Second, MaxDelay: time.Minute, OnExhausted: "fail"}
	if mod != nil {
		mod(&r)
	}
	return r
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func exitCode(c int) Outcome { return Outcome{Cause: CauseExit, Exit: proc.Exit{Code: c}} }

func TestDecidePolicy(t *testing.T) {
	killed := Outcome{Cause: CauseExit, Exit: proc.Exit{Code: -1, Signal: syscall.SIGKILL}}
	unhealthy := Outcome{Cause: CauseUnhealthy, Check: "http"}
	cases := []struct {
		policy schema.RestartPolicy
		o      Outcome
		want   Action
		reason string
	}{
		{schema.RestartOnFailure, exitCode(1), ActionRestart, "restarting at 00:00:01 after exit 1, attempt 1/10"},
		{schema.RestartOnFailure, exitCode(0), ActionDone, "completed (exit 0); not restarted (restart policy on-failure)"},
		{schema.RestartOnFailure, killed, ActionRestart, "after killed by SIGKILL"},
		{schema.RestartOnFailure, unhealthy, ActionRestart, `after check "http" critical`},
		{schema.RestartAlways, exitCode(0), ActionRestart, "after exit 0"},
		{schema.RestartAlways, exitCode(2), ActionRestart, "after exit 2"},
		{schema.RestartNever, exitCode(1), ActionDone, "not restarted (restart policy never)"},
		{schema.RestartNever, exitCode(0), ActionDone, "restart policy never"},
	}
	for _, c := range cases {
		tr := NewRestartTracker(restartCfg(func(r *schema.Restart) { r.Policy = c.policy }))
		d := tr.Decide(c.o, t0, 0)
		if d.Action != c.want || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("%s / %s: got %v %q, want %v containing %q", c.policy, c.o, d.Action, d.Reason, c.want, c.reason)
		}
	}
}

func TestDecideAttemptsWindow(t *testing.T) {
	tr := NewRestartTracker(restartCfg(func(r *schema.Restart) { r.Attempts = 3; r.Window = time.Minute }))
	now := t0
	for i := 1; i <= 3; i++ {
		d := tr.Decide(exitCode(1), now, 0)
		if d.Action != ActionRestart || d.Attempt != i {
			t.Fatalf("restart %d: %+v", i, d)
		}
		now = now.Add(10 * time.Second)
	}
	d := tr.Decide(exitCode(1), now, 0)
	if d.Action != ActionFail || d.Reason != "failed: 3 restarts in 1m (last: exit 1)" {
		t.Fatalf("4th failure within the window: %+v", d)
	}
	// Once the first restarts leave the window, restarting is allowed again.
	now = t0.Add(time.Minute + time.Second)
	d = tr.Decide(exitCode(1), now, 0)
	if d.Action != ActionRestart || d.Attempt != 3 {
		t.Fatalf("after the window slid: %+v", d)
	}
}

func TestDecideBackoffDoublesAndResetsAfterStableRun(t *testing.T) {
	tr := NewRestartTracker(restartCfg(func(r *schema.Restart) { r.Attempts = 0; r.Window = 0 }))
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	now := t0
	for i, w := range want {
		d := tr.Decide(Outcome{Cause: CauseExit, Exit: proc.Exit{Code: 1}, Started: now.Add(-time.Second)}, now, 0)
		if d.Delay != w*time.Second {
			t.Fatalf("failure %d: delay %s, want %s", i+1, d.Delay, w*time.Second)
		}
		now = now.Add(d.Delay + time.Second)
	}
	// A run longer than the stable threshold starts the backoff over.
	d := tr.Decide(Outcome{Cause: CauseExit, Exit: proc.Exit{Code: 1}, Started: now.Add(-2 * time.Minute)}, now, 0)
	if d.Delay != time.Second {
		t.Fatalf("after a stable run: delay %s, want 1s", d.Delay)
	}
}

func TestDecideZeroDelayRestartsAtOnce(t *testing.T) {
	tr := NewRestartTracker(restartCfg(func(r *schema.Restart) { r.Delay = 0; r.MaxDelay = 0; r.Attempts = 0 }))
	for i := 0; i < 100; i++ {
		if d := tr.Decide(exitCode(1), t0.Add(time.Duration(i)*time.Millisecond), 0.9); d.Delay != 0 || d.Action != ActionRestart {
			t.Fatalf("attempt %d: %+v", i, d)
		}
	}
}

func TestDecideHugeAttemptCountsStayInBounds(t *testing.T) {
	tr := NewRestartTracker(restartCfg(func(r *schema.Restart) {
		r.Attempts, r.Window, r.Delay, r.MaxDelay = 0, 0, time.Nanosecond, 90*time.Second
	}))
	now := t0
	for i := 1; i <= 1_000_000; i++ {
		d := tr.Decide(exitCode(1), now, float64(i%100)/100)
		if d.Delay < time.Nanosecond || d.Delay > 90*time.Second || d.Action != ActionRestart {
			t.Fatalf("attempt %d: %+v", i, d)
		}
		if d.Attempt != i {
			t.Fatalf("attempt %d counted as %d", i, d.Attempt)
		}
	}
	if len(tr.restarts) != 0 {
		t.Fatalf("unlimited attempts with no window kept %d history entries", len(tr.restarts))
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		base, maxD  time.Duration
		consecutive int
		jitter      float64
		want        time.Duration
	}{
		{time.Second, time.Minute, 1, 0, time.Second},
		{time.Second, time.Minute, 2, 0, 2 * time.Second},
		{time.Second, time.Minute, 7, 0, time.Minute},
		{time.Second, time.Minute, 1 << 30, 0.99, time.Minute},
		{time.Second, time.Minute, 1, 0.5, 1125 * time.Millisecond},
		{time.Second, 500 * time.Millisecond, 3, 0, time.Second}, // max below base: base wins
		{0, time.Minute, 5, 0.5, 0},
		{time.Duration(1<<62 + 1), time.Duration(1<<63 - 1), 100, 0.99, time.Duration(1<<63 - 1)},
	}
	for _, c := range cases {
		if got := Backoff(c.base, c.maxD, c.consecutive, c.jitter); got != c.want {
			t.Errorf("Backoff(%s, %s, %d, %v) = %s, want %s", c.base, c.maxD, c.consecutive, c.jitter, got, c.want)
		}
	}
}
