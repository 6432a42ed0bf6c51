package supervisor

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/schema"
)

// These tests run the real loop and real processes with a registry that
// never talks to Consul (it only records intent until its Run starts).

func testInstance(t *testing.T, svc *schema.Service) (*Instance, *[]Event) {
	t.Helper()
	client, err := api.NewClient(&api.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	reg := checks.NewRegistry(client, "n1", "127.0.0.1", hclog.NewNullLogger(), time.Minute)
	evc := make(chan Event, 1024)
	var events []Event
	in := newInstance(svc, "web-n1", os.Environ(), hclog.NewNullLogger(), reg, nil, nil, nil,
		func(e Event) { evc <- e }, nil)
	in.register = func(string, checks.Result) {}
	t.Cleanup(func() {
		close(evc)
		for e := range evc {
			events = append(events, e)
		}
	})
	return in, &events
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Regression (issue 10): a command that cannot start, with restart
// { delay = "0s" attempts = 0 }, recursed without end and Stop() never
// returned.
func TestInstanceStopWhileCommandCannotStart(t *testing.T) {
	svc := testService(func(s *schema.Service) {
		s.Command = []string{"/nonexistent/program"}
		s.Restart.Delay, s.Restart.Attempts, s.Restart.Window = 0, 0, 0
	})
	in, _ := testInstance(t, svc)
	go in.run()
	waitFor(t, "backoff after the start failure", 5*time.Second, func() bool { return in.Snapshot().State == StateBackoff })
	if got := in.Snapshot().Output; !strings.Contains(got, "command /nonexistent/program does not exist") {
		t.Errorf("reason %q does not say what is wrong", got)
	}
	stopped := make(chan struct{})
	go func() { in.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return")
	}
}

// Regression (issue 10): the second SIGINT did not kill at once while a
// restart (health, template, on_lost, operator) waited out the stop timeout.
func TestInstanceKillDuringRestartStop(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	svc := testService(func(s *schema.Service) {
		// Ignores SIGTERM (once it says so): only SIGKILL ends it.
		s.Command = []string{"sh", "-c", `trap "" TERM; touch "$READY"; while :; do sleep 0.05; done`}
		s.Stop.Timeout = 6 * time.Second
	})
	in, _ := testInstance(t, svc)
	in.env = append(in.env, "READY="+ready)
	go in.run()
	waitFor(t, "running", 5*time.Second, func() bool { return in.Snapshot().State == StateRunning })
	waitFor(t, "the child ignoring SIGTERM", 5*time.Second, func() bool { _, err := os.Stat(ready); return err == nil })
	pid := in.Snapshot().PID
	restarted := make(chan error, 1)
	go func() { restarted <- in.operate(t.Context(), inRestart, "") }()
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restart's stop to begin", 5*time.Second, func() bool { return in.Snapshot().State == StateStarting })
	start := time.Now()
	stopped := make(chan struct{})
	go func() { in.Stop(); close(stopped) }()
	waitFor(t, "the stop to be served", 5*time.Second, func() bool { return in.Snapshot().State == StateStopping })
	in.Kill()
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		t.Fatalf("stop after Kill still waiting out the 6s stop timeout")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("stop took %v", d)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("pid %d still alive", pid)
	}
}

// The local clock of an instance's args checks: the latest streak start,
// none while one is not passing or began before the process started.
func TestLocalSince(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	s := time.Second
	var zero time.Time
	for _, tc := range []struct {
		name   string
		locals []time.Time
		want   time.Time
	}{
		{"one check passing since after the start", []time.Time{t0.Add(s)}, t0.Add(s)},
		{"two: the later streak", []time.Time{t0.Add(s), t0.Add(3 * s)}, t0.Add(3 * s)},
		{"one not passing", []time.Time{t0.Add(s), zero}, zero},
		{"a streak from before the process started", []time.Time{t0.Add(-s), t0.Add(s)}, zero},
		{"at the start itself", []time.Time{t0}, t0},
	} {
		if got := localSince(tc.locals, t0); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A running instance whose checks are all args checks says in its
// snapshot since when they have passed in mariposa's own runs, about the
// process running: after its start, and again after a restart; with a
// check mariposa does not run, it says nothing.
func TestSnapshotLocalPassing(t *testing.T) {
	args := func(name string, argv ...string) *schema.Check {
		return &schema.Check{Name: name, Kind: schema.CheckArgs, Args: argv, Interval: time.Hour, Timeout: 5 * time.Second}
	}
	svc := testService(func(s *schema.Service) {
		s.Command = []string{"sleep", "60"}
		s.Checks = []*schema.Check{args("a", "true"), args("b", "true")}
		s.Restart.Delay = 0
	})
	in, _ := testInstance(t, svc)
	go in.run()
	t.Cleanup(in.Stop)
	var first Snapshot
	waitFor(t, "the checks passing locally", 10*time.Second, func() bool {
		first = in.Snapshot()
		return first.State == StateRunning && !first.LocalPassingSince.IsZero()
	})
	in.mu.Lock()
	started := in.cur.Started
	in.mu.Unlock()
	if !first.LocalChecks || first.LocalPassingSince.Before(started) {
		t.Fatalf("local %v %v, process started %v", first.LocalChecks, first.LocalPassingSince, started)
	}
	// A restart: the checks run again (kicked, interval 1h), about the new process.
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var next Snapshot
	waitFor(t, "the new process's checks passing locally", 10*time.Second, func() bool {
		next = in.Snapshot()
		return next.State == StateRunning && next.PID != first.PID && !next.LocalPassingSince.IsZero()
	})
	in.mu.Lock()
	started = in.cur.Started
	in.mu.Unlock()
	if next.LocalPassingSince.Before(started) {
		t.Fatalf("local since %v, before the new process started (%v)", next.LocalPassingSince, started)
	}

	mixed := testService(func(s *schema.Service) {
		s.Command = []string{"sleep", "60"}
		s.Checks = []*schema.Check{args("a", "true"), {Name: "ttl", Kind: schema.CheckTTL, TTL: time.Minute}}
	})
	in2, _ := testInstance(t, mixed)
	go in2.run()
	t.Cleanup(in2.Stop)
	waitFor(t, "running", 10*time.Second, func() bool { return in2.Snapshot().State == StateRunning })
	if sn := in2.Snapshot(); sn.LocalChecks || !sn.LocalPassingSince.IsZero() {
		t.Fatalf("a check the agent keeps, yet local %v %v", sn.LocalChecks, sn.LocalPassingSince)
	}
}

// An idle instance's goroutine parks with little on its stack, so that the
// runtime shrinks the stack to 8 KB or less: a service costs its state, not
// a 16 KB stack it used once at start (issue 28). Its loop's frame was
// 3 KB, a hair over the quarter of 16 KB under which the runtime shrinks.
func TestIdleInstanceStack(t *testing.T) {
	const n = 200
	svc := testService(func(s *schema.Service) {
		s.Command = []string{"/nonexistent/program"}
		s.Restart.Delay, s.Restart.Attempts, s.Restart.Window = time.Hour, 0, 0
	})
	stacks := func() uint64 {
		// Each collection shrinks a stack by half at most.
		for range 4 {
			runtime.GC()
		}
		s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := stacks()
	var ins []*Instance
	for range n {
		in, _ := testInstance(t, svc)
		go in.run()
		ins = append(ins, in)
	}
	for _, in := range ins {
		waitFor(t, "backoff after the start failure", 10*time.Second, func() bool { return in.Snapshot().State == StateBackoff })
	}
	// A goroutine still finishing its step when a collection comes keeps
	// its stack until the next one: collect until the deadline. Stacks
	// come in powers of two: 16 KB each before, 4 KB after (8 KB under
	// -race, whose frames are larger); 12 KB leaves room for the test
	// process's other stacks.
	var per float64
	waitFor(t, "an idle instance's stack at 8 KB or less (it was 16 KB)", 10*time.Second, func() bool {
		per = float64(stacks()-before) / n
		return per < 12<<10
	})
	for _, in := range ins {
		in.Stop()
	}
	t.Logf("an idle instance's stack: %.1f KB", per/1024)
}
