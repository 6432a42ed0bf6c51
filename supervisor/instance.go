package supervisor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/schema"
)

// State is where an instance is in its life.
type State string

const (
	StateStarting  State = "starting"
	StateRunning   State = "running"
	StateBackoff   State = "backoff"
	StateFailed    State = "failed"
	StateCompleted State = "completed"
	StateStopping  State = "stopping"
	StateStopped   State = "stopped"
)

// Snapshot is an instance's state for status output and tests.
type Snapshot struct {
	Service   string
	ServiceID string
	State     State
	PID       int
	Restarts  int
	Output    string
}

// Instance supervises one service's process. One goroutine (run) owns all of
// its mutable state; others talk to it through channels.
type Instance struct {
	svc  *schema.Service
	id   string
	env  []string
	log  hclog.Logger
	reg  *checks.Registry
	sink *proc.Sink
	now  func() time.Time

	health  chan checks.NodeHealth // latest-value mailbox
	stopc   chan struct{}
	killc   chan struct{}
	killOne sync.Once
	done    chan struct{}

	mu   sync.Mutex
	snap Snapshot
	cur  *proc.Process
}

func newInstance(svc *schema.Service, id string, env []string, log hclog.Logger, reg *checks.Registry, sink *proc.Sink) *Instance {
	return &Instance{
		svc: svc, id: id, env: env, log: log.Named(svc.Name).With("service_id", id), reg: reg, sink: sink,
		now:    time.Now,
		health: make(chan checks.NodeHealth, 1),
		stopc:  make(chan struct{}), killc: make(chan struct{}), done: make(chan struct{}),
		snap: Snapshot{Service: svc.Name, ServiceID: id, State: StateStarting, Output: "starting"},
	}
}

// Snapshot returns the current state.
func (in *Instance) Snapshot() Snapshot {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.snap
}

// Signal forwards sig to the running process group, if any.
func (in *Instance) Signal(sig syscall.Signal) {
	in.mu.Lock()
	p := in.cur
	in.mu.Unlock()
	if p != nil {
		_ = p.Signal(sig)
	}
}

// deliverHealth hands the newest node health to the instance, replacing any
// value it has not read yet.
func (in *Instance) deliverHealth(h checks.NodeHealth) {
	for {
		select {
		case in.health <- h:
			return
		default:
		}
		select {
		case <-in.health:
		default:
		}
	}
}

// Stop asks the instance to stop and waits until it has.
func (in *Instance) Stop() {
	select {
	case <-in.stopc:
	default:
		close(in.stopc)
	}
	<-in.done
}

// Kill makes a stop in progress skip its drain and grace period.
func (in *Instance) Kill() { in.killOne.Do(func() { close(in.killc) }) }

func (in *Instance) setState(st State, pid int, health, output string) {
	in.mu.Lock()
	in.snap.State, in.snap.PID, in.snap.Output = st, pid, output
	in.mu.Unlock()
	in.reg.SetStatus(in.id, checks.Status{Health: health, Output: output})
}

func (in *Instance) run() {
	defer close(in.done)
	tracker := NewRestartTracker(in.svc.Restart)
	tracks := map[string]*checkTrack{}
	var (
		p        *proc.Process
		exited   <-chan struct{}
		started  time.Time
		restarts int
		lastEnd  string
		timer    = time.NewTimer(time.Hour)
		timerFor string // "start" | "health" | ""
	)
	timer.Stop()
	arm := func(d time.Duration, what string) {
		timer.Stop()
		select {
		case <-timer.C:
		default:
		}
		timer.Reset(d)
		timerFor = what
	}

	var after func(o Outcome)
	start := func() {
		timerFor = ""
		np, err := proc.Start(proc.Spec{Argv: in.svc.Command, Dir: in.svc.Dir, Env: in.env, Output: in.sink, Name: in.svc.Name})
		if err != nil {
			in.log.Error("start failed", "error", err)
			after(Outcome{Cause: CauseExit, Exit: proc.Exit{Code: -1, Err: fmt.Errorf("start failed: %w", err)}, Started: in.now()})
			return
		}
		p, exited = np, np.Done()
		started = np.Started
		in.mu.Lock()
		in.cur = np
		in.snap.Restarts = restarts
		in.mu.Unlock()
		out := fmt.Sprintf("running (pid %d)", np.Pid)
		if restarts > 0 {
			out += fmt.Sprintf("; restarted %d times, last after %s", restarts, lastEnd)
		}
		in.log.Info("started", "pid", np.Pid)
		in.setState(StateRunning, np.Pid, api.HealthPassing, out)
	}
	after = func(o Outcome) {
		p, exited = nil, nil
		in.mu.Lock()
		in.cur = nil
		in.mu.Unlock()
		d := tracker.Decide(o, in.now(), rand.Float64())
		switch d.Action {
		case ActionRestart:
			restarts++
			lastEnd = o.String()
			in.log.Info("restarting", "after", o.String(), "delay", d.Delay, "attempt", d.Attempt)
			if d.Delay == 0 {
				start()
				return
			}
			in.setState(StateBackoff, 0, api.HealthCritical, d.Reason)
			arm(d.Delay, "start")
		case ActionFail:
			in.log.Error("giving up", "reason", d.Reason)
			in.setState(StateFailed, 0, api.HealthCritical, d.Reason)
		case ActionDone:
			in.log.Info("not restarting", "reason", d.Reason)
			in.setState(StateCompleted, 0, api.HealthCritical, d.Reason)
		}
	}
	evalHealth := func() {
		if p == nil || !in.svc.Restart.OnUnhealthy || in.svc.Restart.Policy == schema.RestartNever {
			return
		}
		name, recheck := unhealthyCheck(tracks, started, in.svc.Restart, in.now())
		if name == "" {
			if recheck > 0 {
				arm(recheck, "health")
			}
			return
		}
		in.log.Warn("check critical; restarting", "check", name, "pid", p.Pid)
		old := p
		in.setState(StateStarting, 0, api.HealthCritical, fmt.Sprintf("check %q critical; restarting", name))
		in.stopProcess(old, false)
		after(Outcome{Cause: CauseUnhealthy, Check: name, Exit: old.Exit(), Started: started})
	}

	// args checks run for as long as the service is registered.
	scriptCtx, stopScripts := context.WithCancel(context.Background())
	var scripts sync.WaitGroup
	for _, c := range in.svc.Checks {
		if c.Kind != schema.CheckArgs {
			continue
		}
		sc := &checks.ScriptCheck{ServiceID: in.id, Check: c, Env: in.env, Dir: in.svc.Dir, Registry: in.reg, Log: in.log}
		scripts.Add(1)
		go func() { defer scripts.Done(); sc.Run(scriptCtx) }()
	}

	start()
	for {
		select {
		case <-in.stopc:
			timer.Stop()
			stopScripts()
			in.shutdown(p)
			scripts.Wait()
			return
		case <-exited:
			e := p.Exit()
			// Whatever the child left in its group goes with it.
			_ = p.Signal(syscall.SIGKILL)
			in.log.Info("process exited", "pid", p.Pid, "status", e.String())
			after(Outcome{Cause: CauseExit, Exit: e, Started: started})
		case h := <-in.health:
			if h.Reset {
				// After a gap, a check seen critical now may just have been
				// re-registered: treat every check as newly seen.
				clear(tracks)
			}
			updateTracks(tracks, in.svc, in.id, h.Services[in.id], in.now())
			evalHealth()
		case <-timer.C:
			switch timerFor {
			case "start":
				start()
			case "health":
				evalHealth()
			}
		}
	}
}

// shutdown deregisters, drains, and stops the process (stop signal, then
// SIGKILL to the whole group after the timeout).
func (in *Instance) shutdown(p *proc.Process) {
	pid := 0
	if p != nil {
		pid = p.Pid
	}
	in.mu.Lock()
	in.snap.State, in.snap.Output = StateStopping, "stopping"
	in.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	go func() {
		select {
		case <-in.killc:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := in.reg.Deregister(ctx, in.id); err != nil {
		in.log.Warn("deregister failed", "error", err)
	}
	cancel()
	if p != nil && in.svc.Stop.Drain > 0 {
		in.log.Info("draining", "for", in.svc.Stop.Drain)
		select {
		case <-time.After(in.svc.Stop.Drain):
		case <-in.killc:
		case <-p.Done():
		}
	}
	if p != nil {
		e := in.stopProcess(p, true)
		in.log.Info("stopped", "pid", pid, "status", e.String())
	}
	in.mu.Lock()
	in.cur = nil
	in.snap.State, in.snap.PID, in.snap.Output = StateStopped, 0, "stopped"
	in.mu.Unlock()
}

// stopProcess sends the stop signal to the group and SIGKILLs it after the
// timeout, or at once when killc closes (honourKill).
func (in *Instance) stopProcess(p *proc.Process, honourKill bool) proc.Exit {
	sig, timeout := in.svc.Stop.Signal, in.svc.Stop.Timeout
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	_ = p.Signal(sig)
	t := time.NewTimer(timeout)
	defer t.Stop()
	killc := in.killc
	if !honourKill {
		killc = nil
	}
	select {
	case <-p.Done():
	case <-t.C:
		in.log.Warn("stop timeout; killing the process group", "pid", p.Pid, "timeout", timeout)
	case <-killc:
	}
	_ = p.Signal(syscall.SIGKILL)
	return p.Exit()
}
