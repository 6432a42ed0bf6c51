package supervisor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/leader"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
)

// State is where an instance is in its life.
type State string

const (
	StateStarting  State = "starting"
	StateWaiting   State = "waiting"
	StateRunning   State = "running"
	StateBackoff   State = "backoff"
	StateFailed    State = "failed"
	StateCompleted State = "completed"
	StateStandby   State = "standby"
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
	data *render.ServiceData // dependencies and templates; nil if none
	now  func() time.Time

	// register (re-)registers the service; role is "", "leader" or
	// "follower" and picks the tags and meta of a leader service.
	register func(role string)
	// elector contends for the leader lock; nil without a leader block.
	elector *leader.Elector

	health  chan checks.NodeHealth // latest-value mailbox
	changec chan *schema.Template  // change commands, run one at a time
	stopc   chan struct{}
	killc   chan struct{}
	killOne sync.Once
	done    chan struct{}

	mu     sync.Mutex
	snap   Snapshot
	status checks.Status // the supervisor check's current status
	cur    *proc.Process
}

func newInstance(svc *schema.Service, id string, env []string, log hclog.Logger, reg *checks.Registry, sink *proc.Sink,
	data *render.ServiceData, register func(role string), elector *leader.Elector) *Instance {
	return &Instance{
		svc: svc, id: id, env: env, log: log.Named(svc.Name).With("service_id", id), reg: reg, sink: sink, data: data,
		register: register, elector: elector,
		now:     time.Now,
		health:  make(chan checks.NodeHealth, 1),
		changec: make(chan *schema.Template, 16),
		stopc:   make(chan struct{}), killc: make(chan struct{}), done: make(chan struct{}),
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
// value it has not read yet. A reset is never lost to a later view.
func (in *Instance) deliverHealth(h checks.NodeHealth) {
	for {
		select {
		case in.health <- h:
			return
		default:
		}
		select {
		case old := <-in.health:
			h.Reset = h.Reset || old.Reset
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
	in.status = checks.Status{Health: health, Output: output}
	in.mu.Unlock()
	in.reg.SetStatus(in.id, checks.Status{Health: health, Output: output})
}

// currentStatus is what a (re-)registration starts the supervisor check at.
func (in *Instance) currentStatus() checks.Status {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.status.Health == "" {
		return checks.Status{Health: api.HealthCritical, Output: "starting"}
	}
	return in.status
}

// timer is a stoppable one-shot timer whose channel is nil while disarmed,
// so a select on it blocks.
type timer struct{ t *time.Timer }

func (t *timer) arm(d time.Duration) {
	t.disarm()
	t.t = time.NewTimer(d)
}

func (t *timer) disarm() {
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
}

func (t *timer) c() <-chan time.Time {
	if t.t == nil {
		return nil
	}
	return t.t.C
}

// runLoop is the state of one instance's goroutine.
type runLoop struct {
	in       *Instance
	tracker  *RestartTracker
	tracks   map[string]*checkTrack
	p        *proc.Process
	started  time.Time
	restarts int
	lastEnd  string

	// Gating on dependencies and templates.
	waitingSince time.Time    // zero unless waiting
	depsAtStart  []bool       // which dependencies held when the process started
	lostPending  map[int]bool // on_lost = restart: restart once dependency i is back

	startT, healthT, depT timer

	// Leadership.
	term      *leader.Term
	termDone  chan struct{} // closed to let the elector's onTerm return
	termc     chan termMsg
	leaderEnv []string
	// stopElecting stops contending (shutdown, or a leader whose restarts
	// are exhausted gives the lock up).
	stopElecting func()
	gaveUp       bool
}

// termMsg hands a new term from the elector's goroutine to the loop.
type termMsg struct {
	t    *leader.Term
	done chan struct{}
}

func (l *runLoop) standby() bool {
	return l.in.svc.Leader != nil && l.in.svc.Leader.Mode == "standby"
}

func (in *Instance) run() {
	defer close(in.done)
	l := &runLoop{in: in, tracker: NewRestartTracker(in.svc.Restart), tracks: map[string]*checkTrack{},
		lostPending: map[int]bool{}}

	// args checks run for as long as the service is registered.
	scriptCtx, stopScripts := context.WithCancel(context.Background())
	var scripts sync.WaitGroup
	scripts.Add(1)
	go func() { defer scripts.Done(); in.changeCommands(scriptCtx.Done()) }()
	for _, c := range in.svc.Checks {
		if c.Kind != schema.CheckArgs {
			continue
		}
		sc := &checks.ScriptCheck{ServiceID: in.id, Check: c, Env: in.env, Dir: in.svc.Dir, Registry: in.reg, Log: in.log}
		scripts.Add(1)
		go func() { defer scripts.Done(); sc.Run(scriptCtx) }()
	}
	var dataChanged <-chan struct{}
	if in.data != nil {
		dataChanged = in.data.Changed()
	}

	// Leadership: the elector runs in its own goroutine and hands each term
	// to this loop, waiting until the loop has stopped the leader-only work.
	electCtx, stopElecting := context.WithCancel(context.Background())
	l.stopElecting = stopElecting
	electorDone := make(chan struct{})
	if in.elector != nil {
		l.termc = make(chan termMsg)
		l.leaderEnv = leaderEnv(in.svc.Leader, nil)
		go func() {
			defer close(electorDone)
			in.elector.Run(electCtx, func(t *leader.Term) {
				m := termMsg{t: t, done: make(chan struct{})}
				select {
				case l.termc <- m:
					<-m.done
				case <-electCtx.Done():
				}
			})
		}()
	} else {
		close(electorDone)
	}

	if l.standby() {
		// Not registered, not running, until elected.
		in.mu.Lock()
		in.snap.State, in.snap.Output = StateStandby, "standby: waiting for leadership"
		in.mu.Unlock()
		in.log.Info("standby: contending for leadership", "key", in.svc.Leader.Key)
	} else {
		role := ""
		if in.svc.Leader != nil {
			role = "follower"
		}
		in.register(role)
		l.tryStart()
	}
	for {
		var exited, lost <-chan struct{}
		if l.p != nil {
			exited = l.p.Done()
		}
		if l.term != nil {
			lost = l.term.Lost()
		}
		select {
		case <-in.stopc:
			l.startT.disarm()
			l.healthT.disarm()
			l.depT.disarm()
			stopScripts()
			// Stop contending first, so that giving the term back below
			// releases the lock instead of starting another round.
			stopElecting()
			var expired <-chan struct{}
			if l.term != nil {
				expired = l.term.Expired()
			}
			if l.p != nil || !l.standby() || l.term != nil {
				in.shutdown(l.p, expired)
			}
			if l.termDone != nil {
				close(l.termDone)
			}
			<-electorDone // lock released, session destroyed
			scripts.Wait()
			in.mu.Lock()
			in.snap.State, in.snap.PID, in.snap.Output = StateStopped, 0, "stopped"
			in.mu.Unlock()
			return
		case m := <-l.termc:
			l.gainTerm(m)
		case <-lost:
			l.loseTerm()
		case <-exited:
			p := l.p
			e := p.Exit()
			// Whatever the child left in its group goes with it.
			_ = p.Signal(syscall.SIGKILL)
			in.log.Info("process exited", "pid", p.Pid, "status", e.String())
			l.after(Outcome{Cause: CauseExit, Exit: e, Started: l.started})
		case h := <-in.health:
			if h.Reset {
				// After a gap, a check seen critical now may just have been
				// re-registered: treat every check as newly seen.
				clear(l.tracks)
			}
			updateTracks(l.tracks, in.svc, in.id, h.Services[in.id], in.now())
			l.evalHealth()
		case <-dataChanged:
			l.dataChanged()
		case <-l.startT.c():
			l.startT.disarm()
			l.tryStart()
		case <-l.depT.c():
			l.depT.disarm()
			l.tryStart()
		case <-l.healthT.c():
			l.healthT.disarm()
			l.evalHealth()
		}
	}
}

// tryStart starts the process if its dependencies and templates are ready,
// else waits for them (and fails once a dependency's timeout has passed).
func (l *runLoop) tryStart() {
	in := l.in
	env := in.env
	if l.leaderEnv != nil {
		env = dedupeEnv(append(append([]string{}, in.env...), l.leaderEnv...))
	}
	if in.data != nil {
		st := in.data.State()
		if !st.Ready() {
			now := in.now()
			if l.waitingSince.IsZero() {
				l.waitingSince = now
			}
			if reason, next := depTimeout(st, l.waitingSince, now); reason != "" {
				in.log.Error("giving up waiting", "reason", reason)
				l.waitingSince = time.Time{}
				in.setState(StateFailed, 0, api.HealthCritical, reason)
				return
			} else if next > 0 {
				l.depT.arm(next)
			}
			if in.Snapshot().Output != st.Waiting {
				in.log.Info("waiting", "for", st.Waiting)
			}
			in.setState(StateWaiting, 0, api.HealthCritical, st.Waiting)
			return
		}
		l.waitingSince = time.Time{}
		l.depT.disarm()
		env = dedupeEnv(append(append(append(append([]string{}, in.env...), l.leaderEnv...), st.DepEnv...), st.TemplateEnv...))
		l.depsAtStart = l.depsAtStart[:0]
		for _, d := range st.Deps {
			l.depsAtStart = append(l.depsAtStart, d.Satisfied)
		}
		clear(l.lostPending)
	}
	np, err := proc.Start(proc.Spec{Argv: in.svc.Command, Dir: in.svc.Dir, Env: env, Output: in.sink, Name: in.svc.Name})
	if err != nil {
		in.log.Error("start failed", "error", err)
		l.after(Outcome{Cause: CauseExit, Exit: proc.Exit{Code: -1, Err: fmt.Errorf("start failed: %w", err)}, Started: in.now()})
		return
	}
	l.p, l.started = np, np.Started
	in.mu.Lock()
	in.cur = np
	in.snap.Restarts = l.restarts
	in.mu.Unlock()
	out := fmt.Sprintf("running (pid %d)", np.Pid)
	if in.svc.Leader != nil {
		if l.term != nil {
			out += " as leader"
		} else {
			out += " as follower"
		}
	}
	if l.restarts > 0 {
		out += fmt.Sprintf("; restarted %d times, last after %s", l.restarts, l.lastEnd)
	}
	in.log.Info("started", "pid", np.Pid)
	in.setState(StateRunning, np.Pid, api.HealthPassing, out)
}

// depTimeout says whether an unmet dependency has waited past its timeout,
// and otherwise when the next timeout would pass.
func depTimeout(st render.ServiceState, since, now time.Time) (reason string, next time.Duration) {
	for _, d := range st.Deps {
		if d.Satisfied || d.Dep.Timeout <= 0 {
			continue
		}
		at := since.Add(d.Dep.Timeout)
		if !now.Before(at) {
			return fmt.Sprintf("failed: gave up after %s %s", shortDuration(d.Dep.Timeout), d.Waiting), 0
		}
		if n := at.Sub(now); next == 0 || n < next {
			next = n
		}
	}
	return "", next
}

// after decides what follows the end of a run.
func (l *runLoop) after(o Outcome) {
	in := l.in
	l.p = nil
	l.healthT.disarm()
	in.mu.Lock()
	in.cur = nil
	in.mu.Unlock()
	d := l.tracker.Decide(o, in.now(), rand.Float64())
	switch d.Action {
	case ActionRestart:
		l.restarts++
		l.lastEnd = o.String()
		in.log.Info("restarting", "after", o.String(), "delay", d.Delay, "attempt", d.Attempt)
		if d.Delay == 0 {
			l.tryStart()
			return
		}
		in.setState(StateBackoff, 0, api.HealthCritical, d.Reason)
		l.startT.arm(d.Delay)
	case ActionFail:
		in.log.Error("giving up", "reason", d.Reason)
		in.setState(StateFailed, 0, api.HealthCritical, d.Reason)
		if l.term != nil && l.standby() {
			// A leader that cannot run hands the lock to a standby.
			in.log.Warn("giving up leadership")
			l.gaveUp = true
			l.stopElecting()
		}
	case ActionDone:
		in.log.Info("not restarting", "reason", d.Reason)
		in.setState(StateCompleted, 0, api.HealthCritical, d.Reason)
	}
}

// restartNow stops the process and starts it again at once, outside the
// restart policy: a configuration change, not a failure.
func (l *runLoop) restartNow(why string) {
	in := l.in
	if l.p == nil {
		return
	}
	in.log.Info("restarting", "why", why, "pid", l.p.Pid)
	in.setState(StateStarting, 0, api.HealthCritical, why+"; restarting")
	in.stopProcess(l.p, false, l.expired())
	l.p = nil
	in.mu.Lock()
	in.cur = nil
	in.mu.Unlock()
	l.healthT.disarm()
	l.restarts++
	l.lastEnd = why
	l.tryStart()
}

func (l *runLoop) evalHealth() {
	in := l.in
	if l.p == nil || !in.svc.Restart.OnUnhealthy || in.svc.Restart.Policy == schema.RestartNever {
		return
	}
	name, recheck := unhealthyCheck(l.tracks, l.started, in.svc.Restart, in.now())
	if name == "" {
		if recheck > 0 {
			l.healthT.arm(recheck)
		}
		return
	}
	in.log.Warn("check critical; restarting", "check", name, "pid", l.p.Pid)
	old := l.p
	in.setState(StateStarting, 0, api.HealthCritical, fmt.Sprintf("check %q critical; restarting", name))
	in.stopProcess(old, false, l.expired())
	l.after(Outcome{Cause: CauseUnhealthy, Check: name, Exit: old.Exit(), Started: l.started})
}

// dataChanged applies what changed in the service's Consul data: a start
// that was waiting, template change_mode actions, and on_lost.
func (l *runLoop) dataChanged() {
	in := l.in
	if l.p == nil {
		// Not running: only a wait can move on. (Events of renders while
		// nothing runs need no action; the next start reads the files.)
		if in.Snapshot().State == StateWaiting {
			l.tryStart()
		}
		return
	}
	st := in.data.State()
	restart := ""
	var signals []syscall.Signal
	for _, ev := range st.Events {
		t := ev.Template
		in.log.Info("template rendered", "destination", ev.Destination, "change_mode", t.ChangeMode)
		switch {
		case t.Env || t.ChangeMode == "restart" || t.ChangeMode == "":
			restart = "template " + ev.Destination + " changed"
		case t.ChangeMode == "signal":
			if !slices.Contains(signals, t.Signal) {
				signals = append(signals, t.Signal)
			}
		case t.ChangeMode == "command":
			in.runChangeCommand(t)
		}
	}
	// on_lost, against what held when the process started.
	for i, d := range st.Deps {
		if i >= len(l.depsAtStart) {
			break
		}
		switch d.Dep.OnLost {
		case "stop":
			if l.depsAtStart[i] && !d.Satisfied {
				in.log.Warn("dependency lost; stopping until it is back", "dependency", d.Dep.Name)
				in.stopProcess(l.p, false, l.expired())
				l.p = nil
				in.mu.Lock()
				in.cur = nil
				in.mu.Unlock()
				l.healthT.disarm()
				l.tryStart() // waits, showing what for
				return
			}
		case "restart":
			if l.depsAtStart[i] && !d.Satisfied {
				l.lostPending[i] = true
			} else if l.lostPending[i] && d.Satisfied {
				restart = "dependency " + d.Dep.Name + " came back"
			}
		}
	}
	if restart != "" {
		l.restartNow(restart)
		return
	}
	for _, sig := range signals {
		in.log.Info("signalling after a template change", "signal", proc.SignalName(sig), "pid", l.p.Pid)
		_ = l.p.Signal(sig)
	}
}

// runChangeCommand queues a template's change command. The commands of a
// service run one at a time, in order (as consul-template runs them), off the
// supervisor's loop.
func (in *Instance) runChangeCommand(t *schema.Template) {
	select {
	case in.changec <- t:
	default:
		in.log.Warn("too many template change commands pending; skipping one", "destination", t.Destination)
	}
}

// changeCommands runs queued change commands until stop closes.
func (in *Instance) changeCommands(stop <-chan struct{}) {
	for {
		var t *schema.Template
		select {
		case <-stop:
			return
		case t = <-in.changec:
		}
		p, err := proc.Start(proc.Spec{Argv: t.Command, Dir: in.svc.Dir, Env: in.env, Output: in.sink, Name: in.svc.Name + ".change"})
		if err != nil {
			in.log.Error("template change command failed to start", "destination", t.Destination, "error", err)
			continue
		}
		if e := p.Exit(); e.Success() {
			in.log.Info("template change command done", "destination", t.Destination)
		} else {
			in.log.Warn("template change command failed", "destination", t.Destination, "status", e.String())
		}
	}
}

// shutdown deregisters, drains, and stops the process (stop signal, then
// SIGKILL to the whole group after the timeout).
func (in *Instance) shutdown(p *proc.Process, expired <-chan struct{}) {
	pid := 0
	if p != nil {
		pid = p.Pid
	}
	in.mu.Lock()
	in.snap.State, in.snap.Output = StateStopping, "stopping"
	in.mu.Unlock()
	// Deregister first (the registry bounds each call; a second signal
	// cuts the wait short).
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-in.killc:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := in.reg.Deregister(ctx, in.id); err != nil {
		in.log.Warn("deregister failed; will retry until mariposa exits", "error", err)
	}
	cancel()
	if p != nil && in.svc.Stop.Drain > 0 {
		in.log.Info("draining", "for", in.svc.Stop.Drain)
		select {
		case <-time.After(in.svc.Stop.Drain):
		case <-in.killc:
		case <-p.Done():
		case <-expired:
		}
	}
	if p != nil {
		e := in.stopProcess(p, true, expired)
		in.log.Info("stopped", "pid", pid, "status", e.String())
	}
	in.mu.Lock()
	in.cur = nil
	in.snap.State, in.snap.PID, in.snap.Output = StateStopped, 0, "stopped"
	in.mu.Unlock()
}

// stopProcess sends the stop signal to the group and SIGKILLs it after the
// timeout, or at once when killc closes (honourKill) or expired closes (the
// leader lock may be anyone's soon).
func (in *Instance) stopProcess(p *proc.Process, honourKill bool, expired <-chan struct{}) proc.Exit {
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
	case <-expired:
		in.log.Warn("leadership expired while stopping; killing the process group", "pid", p.Pid)
	}
	_ = p.Signal(syscall.SIGKILL)
	return p.Exit()
}

// expired is the current term's Expired channel, or nil.
func (l *runLoop) expired() <-chan struct{} {
	if l.term == nil {
		return nil
	}
	return l.term.Expired()
}

// clearProcess forgets the process after it stopped outside after().
func (l *runLoop) clearProcess() {
	l.p = nil
	l.healthT.disarm()
	l.in.mu.Lock()
	l.in.cur = nil
	l.in.mu.Unlock()
}

// gainTerm: this instance leads. In standby mode it registers and starts;
// in tag mode it re-registers with the leader tag and applies change_mode.
func (l *runLoop) gainTerm(m termMsg) {
	in, t := l.in, m.t
	l.term, l.termDone = t, m.done
	l.leaderEnv = leaderEnv(in.svc.Leader, t)
	in.log.Info("leadership acquired", "key", t.Key, "index", t.Index)
	in.register("leader")
	if l.standby() {
		l.tryStart()
		return
	}
	l.applyRoleChange(func() { l.restartNow("became leader") })
}

// applyRoleChange does what the leader block's change_mode says after a
// change of role in tag mode; restart performs the "restart" case.
func (l *runLoop) applyRoleChange(restart func()) {
	switch l.in.svc.Leader.ChangeMode {
	case "signal":
		if l.p != nil {
			_ = l.p.Signal(l.in.svc.Leader.Signal)
		}
		l.refreshRunning()
	case "noop":
		l.refreshRunning()
	default:
		restart()
	}
}

// loseTerm: the term ended. The leader-only work stops first (at once if the
// term expired: the lock may be anyone's soon), then the registration
// follows, then the elector may go on.
func (l *runLoop) loseTerm() {
	in, t := l.in, l.term
	expired := false
	select {
	case <-t.Expired():
		expired = true
	default:
	}
	in.log.Warn("leadership ended", "reason", t.Err(), "expired", expired)
	l.leaderEnv = leaderEnv(in.svc.Leader, nil)
	kill := func() {
		if l.p == nil {
			return
		}
		if expired {
			_ = l.p.Signal(syscall.SIGKILL)
			l.p.Exit()
		} else {
			in.stopProcess(l.p, false, t.Expired())
		}
		l.clearProcess()
	}
	if l.standby() {
		kill()
		l.startT.disarm()
		l.depT.disarm()
		l.term = nil
		if !l.gaveUp {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := in.reg.Deregister(ctx, in.id); err != nil {
				in.log.Warn("deregister failed", "error", err)
			}
			cancel()
			in.mu.Lock()
			in.snap.State, in.snap.PID, in.snap.Output = StateStandby, 0, "standby: waiting for leadership"
			in.status = checks.Status{}
			in.mu.Unlock()
		}
	} else {
		l.term = nil
		l.applyRoleChange(func() {
			if l.p != nil {
				kill()
				l.restarts++
				l.lastEnd = "leadership lost"
				l.tryStart()
			}
		})
		in.register("follower")
	}
	close(l.termDone)
	l.termDone = nil
}

// refreshRunning rewrites the running status after a role change that did
// not restart the process.
func (l *runLoop) refreshRunning() {
	if l.p == nil {
		return
	}
	role := "follower"
	if l.term != nil {
		role = "leader"
	}
	l.in.setState(StateRunning, l.p.Pid, api.HealthPassing, fmt.Sprintf("running (pid %d) as %s", l.p.Pid, role))
}

// leaderEnv is MARIPOSA_LEADER and friends for a leader service; t is the
// current term, nil when not leading.
func leaderEnv(b *schema.Leader, t *leader.Term) []string {
	if b == nil {
		return nil
	}
	if t == nil {
		return []string{"MARIPOSA_LEADER=0", "MARIPOSA_LEADER_KEY=" + b.Key, "MARIPOSA_LEADER_SESSION=", "MARIPOSA_LEADER_INDEX="}
	}
	return []string{"MARIPOSA_LEADER=1", "MARIPOSA_LEADER_KEY=" + t.Key, "MARIPOSA_LEADER_SESSION=" + t.Session,
		"MARIPOSA_LEADER_INDEX=" + strconv.FormatUint(t.Index, 10)}
}
