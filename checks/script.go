package checks

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/schema"
)

// maxScriptOutput bounds what an args check reports, as Consul bounds its
// own script checks' output.
const maxScriptOutput = 4096

// ScriptCheck runs an args check every interval and reports the result
// through the check's TTL: exit 0 passing, 1 warning, anything else (or a
// timeout) critical. The agent needs no enable_script_checks.
type ScriptCheck struct {
	ServiceID string
	Check     *schema.Check
	Env       []string
	Dir       string
	Registry  *Registry
	Log       hclog.Logger
	// Kick, when it receives, runs the check at once (after the run in
	// flight): the supervisor kicks it when it starts a process, so that a
	// new process is not shown with the status its predecessor left for up
	// to an interval.
	Kick <-chan struct{}
	// Cred, when set, is who the check runs as: the service's user.
	Cred *proc.Credential
	// NoNewPrivs: the check cannot gain privileges (the service's setting).
	NoNewPrivs bool

	// passing is the end of the first run of the check's current passing
	// streak about the current process (Local); nil: not passing, or no
	// result about this process yet.
	passing atomic.Pointer[time.Time]
}

// Local is what mariposa itself knows of the check, before Consul does:
// since when every run about the current process has passed (the end of
// the first of them), or zero when the last result was not passing or
// none came since the process started (a Kick). The catalog shows the
// same result once the agent has synced it to the servers (anti-entropy)
// and the node's health query has seen it: about 0.1-0.2 s later.
func (s *ScriptCheck) Local() time.Time {
	if p := s.passing.Load(); p != nil {
		return *p
	}
	return time.Time{}
}

// localStreak is the start of an args check's local passing streak after
// a result st that ended at, given the streak's start before it (zero:
// none). kicked: a process started while the run was under way (a Kick
// is pending), so the result may be about the previous one and starts
// nothing: the streak starts over with the first run after the Kick.
func localStreak(since time.Time, st Result, at time.Time, kicked bool) time.Time {
	switch {
	case kicked || st.Health != api.HealthPassing:
		return time.Time{}
	case since.IsZero():
		return at
	}
	return since
}

// noteLocal records a result that ended at in the local streak.
func (s *ScriptCheck) noteLocal(st Result, at time.Time) {
	since := localStreak(s.Local(), st, at, len(s.Kick) > 0)
	if since.IsZero() {
		s.passing.Store(nil)
	} else {
		s.passing.Store(&since)
	}
}

// Run runs the check until ctx ends, the first time at once, and at once
// again on each Kick. Every result
// is reported, changed or not: that is what keeps the check's TTL
// (ArgsCheckTTL) from running out.
func (s *ScriptCheck) Run(ctx context.Context) {
	id := CheckID(s.ServiceID, s.Check.Name)
	t := time.NewTimer(0)
	defer t.Stop()
	var last *Result
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.Kick:
			s.passing.Store(nil) // a new process: nothing known of it yet
		}
		res := make(chan Result, 1)
		go func() { res <- RunScriptAs(ctx, s.Check.Args, s.Env, s.Dir, s.Check.Timeout, s.Cred, s.NoNewPrivs) }()
		st := s.await(id, res, last)
		if ctx.Err() != nil {
			return // cut short by the stop: not a result
		}
		last = &st
		s.noteLocal(st, time.Now())
		s.Registry.SetCheck(s.ServiceID, id, st)
		t.Reset(s.interval())
	}
}

// interval guards against a Check not made by the schema package (which
// requires a positive interval): a zero one would spin.
func (s *ScriptCheck) interval() time.Duration {
	if s.Check.Interval <= 0 {
		return 10 * time.Second
	}
	return s.Check.Interval
}

// await returns the result of the run in flight. Meanwhile it reports the
// previous result again every interval, as Consul keeps a script check's
// status while it runs: results are normally at most interval + timeout
// apart, within the TTL, but a run can outlast its timeout (its output is
// awaited for up to a second more; a loaded machine starts it late), and
// the TTL must not run out because of that.
func (s *ScriptCheck) await(id string, res <-chan Result, last *Result) Result {
	tick := time.NewTicker(s.interval())
	defer tick.Stop()
	for {
		select {
		case st := <-res:
			return st
		case <-tick.C:
			if last != nil {
				s.Registry.SetCheck(s.ServiceID, id, *last)
			}
		}
	}
}

// RunScript runs argv once in its own process group and maps the result to
// a check status. A timeout kills the whole group.
func RunScript(ctx context.Context, argv, env []string, dir string, timeout time.Duration) Result {
	return RunScriptAs(ctx, argv, env, dir, timeout, nil, false)
}

// RunScriptAs is RunScript as the user cred (nil: mariposa's own), with
// no_new_privs if nnp.
func RunScriptAs(ctx context.Context, argv, env []string, dir string, timeout time.Duration, cred *proc.Credential, nnp bool) Result {
	var mu sync.Mutex
	var out strings.Builder
	sink := proc.NewSink(256, func(l proc.Line) {
		mu.Lock()
		defer mu.Unlock()
		if out.Len() < maxScriptOutput {
			out.WriteString(l.Text)
			out.WriteByte('\n')
		}
	}, nil)
	p, err := proc.Start(proc.Spec{Argv: argv, Env: env, Dir: dir, Output: sink, Cred: cred, NoNewPrivs: nnp})
	if err != nil {
		sink.Close()
		return Result{Health: api.HealthCritical, Output: "check could not start: " + err.Error()}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut := false
	select {
	case <-p.Done():
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
	}
	// Whatever is left of the group goes, on timeout and otherwise.
	_ = p.Signal(syscall.SIGKILL)
	e := p.Exit()
	// Let the last lines arrive; a descendant that left the group and kept
	// the pipe open cannot hold the check up for long.
	select {
	case <-p.OutputDone():
	case <-time.After(time.Second):
	}
	sink.Close()
	mu.Lock()
	text := strings.TrimRight(out.String(), "\n")
	mu.Unlock()
	if len(text) > maxScriptOutput {
		text = text[:maxScriptOutput]
	}
	switch {
	case timedOut:
		return Result{Health: api.HealthCritical, Output: fmt.Sprintf("timed out after %s; killed the check's process group\n%s", timeout, text)}
	case e.Success():
		return Result{Health: api.HealthPassing, Output: text}
	case e.Signal == 0 && e.Code == 1:
		return Result{Health: api.HealthWarning, Output: text}
	default:
		return Result{Health: api.HealthCritical, Output: strings.TrimSpace(e.String() + "\n" + text)}
	}
}
