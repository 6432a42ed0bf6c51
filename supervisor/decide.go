package supervisor

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/render"
	"github.com/mariposa-sh/mariposa/schema"
)

// This file is the instance's brain: decide is a pure function of the
// instance's state, one input and the time. It never blocks, never talks
// to Consul or the kernel; it returns the actions for the loop (instance.go)
// to carry out. Whatever completes later (a process exits, a deregistration
// returns) comes back as another input. See doc.go for the state diagram.

// inputKind is what happened.
type inputKind int

const (
	inBoot          inputKind = iota // the loop starts: register, then start
	inStarted                        // actStart succeeded: pid, started
	inStartFailed                    // actStart failed: err
	inExited                         // the process ended (asked to or not): pid, exit, stderr
	inHealth                         // a new view of the node's health: states, reset
	inData                           // dependencies or templates changed: data
	inTimer                          // a timer fired: timer
	inTermGained                     // leadership acquired: term
	inTermLost                       // leadership ended: expired, why
	inTermExpired                    // the held term's deadline passed: kill whatever is still stopping
	inSlotLost                       // the count slot's hold ended: expired, why
	inSlotExpired                    // the slot's deadline passed: kill whatever is still stopping
	inDeregistered                   // actDeregister returned
	inStop                           // stop for good (shutdown, reload, removal)
	inKill                           // a stop in progress must not wait any longer
	inRestart                        // an operator asked for a restart
	inReset                          // an operator asked to clear a failure
	inReloadGranted                  // the reload token of request seq was granted
	inPause                          // the pause state changed: pause
	inAdopted                        // the loop starts with a process an upgrade handed over: pid, started, restarts, why (how the last run ended), term
)

// input is one event for decide.
type input struct {
	kind    inputKind
	pid     int
	started time.Time
	err     error
	exit    proc.Exit
	stderr  string // the child's last stderr line when it exited
	states  []checks.CatalogCheck
	reset   bool
	data    render.ServiceState
	hasData bool // inBoot: data is set
	timer   timerID
	term    termInfo
	expired bool
	why     string
	seq     uint64 // inReloadGranted
	pause   Pause  // inPause
	by      string // inRestart, inReset: who asked (Event.Actor)
	// inAdopted: the restarts so far, and the term the process runs
	// under (hasTerm).
	restarts    int
	hasTerm     bool
	depsAtStart []bool
	tracker     TrackerState
	// inAdopted without a process (pid 0): the state it waited in
	// (backoff until until, failed, completed) and its reason.
	idle   State
	reason string
	until  time.Time
}

// termInfo is what the instance needs of a leadership term.
type termInfo struct {
	Key     string
	Session string
	Index   uint64
}

type timerID int

const (
	timerStart  timerID = iota // backoff before the next start
	timerDep                   // the next dependency timeout
	timerHealth                // look at the checks again
	timerDrain                 // the drain before the stop signal
	timerReload                // look again whether a reloaded instance may give its token back
	numTimers
)

type actionKind int

const (
	actRegister      actionKind = iota // (re-)register with role
	actDeregister                      // deregister; completion: inDeregistered
	actStart                           // start the process with env; completion: inStarted or inStartFailed
	actStop                            // stop signal to the group, SIGKILL after the timeout (at once with kill); completion: inExited
	actKill                            // SIGKILL the group of the process being stopped, now
	actSignal                          // send sig to the main process
	actArm                             // arm timer for d
	actDisarm                          // disarm timer
	actChangeCommand                   // queue a template's change command
	actStopElecting                    // stop contending for leadership
	actReleaseTerm                     // the leader-only work has stopped: let the elector go on
	actEmit                            // an event for the sinks
	actReply                           // answer an operator's request with err
	actAcquireReload                   // ask for a reload token (request seq); completion: inReloadGranted
	actReleaseReload                   // give back the reload token of request seq, or stop asking for it
	actDone                            // the instance has stopped for good
)

// action is one effect for the loop.
type action struct {
	kind  actionKind
	role  string
	env   []string // actStart: added to the instance's base env
	kill  bool
	sig   syscall.Signal
	timer timerID
	d     time.Duration
	tmpl  *schema.Template
	ev    Event
	err   error
	// actAcquireReload, actReleaseReload.
	seq    uint64
	reload ReloadRequest
	// actReleaseTerm: the release withdraws the registration from the
	// catalog in its own transaction (the deregistration has not returned).
	withdraw bool
}

// afterStop is what follows once a process mariposa is stopping has exited.
type afterStop int

const (
	thenOutcome  afterStop = iota // a health restart: the restart policy decides (outcome)
	thenRestart                   // start again at once (a change, not a failure): why
	thenWait                      // on_lost = stop: wait for the dependency again
	thenTermLost                  // leadership ended: hand the term back
	thenShutdown                  // stopping for good
)

// instState is everything an instance's decisions depend on. decide takes
// it by value and returns the next one; its maps are updated in place, so
// the old value must not be used again.
type instState struct {
	svc *schema.Service
	id  string

	state  State
	reason string
	since  time.Time
	until  time.Time // backoff: when the next start is due

	// The process: pid != 0 while one exists (running or being stopped).
	pid      int
	started  time.Time
	stopping bool
	then     afterStop
	outcome  Outcome // thenOutcome
	thenWhy  string  // thenRestart
	killed   bool    // SIGKILL sent for the current stop

	restarts int
	lastEnd  string // how the last run ended
	stderr   string // the child's last stderr line, as of its last exit
	tracker  RestartTracker

	tracks map[string]*checkTrack

	hasData      bool
	data         render.ServiceState // without Events
	waitingSince time.Time
	depsAtStart  []bool
	lostPending  map[int]bool

	// slot is the count slot the instance runs in (nil: not a cluster
	// instance). It is held when the instance is made; once lost, the
	// process stops (at once if expired) and does not start again: the
	// fleet layer withdraws the instance.
	slot     *SlotInfo
	slotLost string // why the slot was lost; "" while held

	term     *termInfo // non-nil while leading (until the term is handed back)
	termLost bool      // the term ended; hand it back once the leader-only work stopped
	expired  bool      // the term's deadline passed: no stop may wait
	gaveUp   bool      // restarts exhausted: stopped contending

	// Coordinated reloads (reload.go): reload waits for its token or holds
	// it; nextReload is a newer change to ask for once it is given back.
	reload     *reloadReq
	nextReload *reloadReq
	reloadSeq  uint64
	ungated    bool // no reload gate: coordinated templates act at once

	// paused: automatic restarts wait for the resume (pause.go);
	// healthHeld: the critical check a health restart waits on.
	paused     Pause
	healthHeld string

	registered   bool // a registration was asked for and not withdrawn
	shutdown     bool
	deregistered bool // shutdown: the deregistration returned
	draining     bool
	kill         bool
	done         bool
}

func newInstState(svc *schema.Service, id string, now time.Time) instState {
	return instState{svc: svc, id: id, state: StateStarting, reason: "starting", since: now,
		tracker: *NewRestartTracker(svc.Restart), tracks: map[string]*checkTrack{}, lostPending: map[int]bool{}}
}

func (s *instState) standby() bool { return s.svc.Leader != nil && s.svc.Leader.Mode == "standby" }

// health is the supervisor check's status for the state.
func (s *instState) health() string {
	if s.state == StateRunning {
		return api.HealthPassing
	}
	return api.HealthCritical
}

func (s *instState) role() string {
	switch {
	case s.svc.Leader == nil:
		return ""
	case s.term != nil && !s.termLost:
		return "leader"
	case s.standby():
		return ""
	}
	return "follower"
}

// stepper collects the actions of one decision.
type stepper struct {
	s      *instState
	now    time.Time
	jitter float64
	acts   []action
	by     string // who asked for the input being applied: its events' Actor
}

// decide applies one input. jitter in [0,1) spreads restart backoffs.
func decide(s instState, in input, now time.Time, jitter float64) (instState, []action) {
	st := &stepper{s: &s, now: now, jitter: jitter, by: in.by}
	st.step(in)
	st.settleReload()
	return s, st.acts
}

func (st *stepper) do(a action) { st.acts = append(st.acts, a) }

func (st *stepper) emit(kind EventKind, reason string) {
	ev := Event{Time: st.now, Service: st.s.svc.Name, ServiceID: st.s.id, Kind: kind, PID: st.s.pid, Reason: reason, Actor: st.by}
	if st.s.slot != nil {
		ev.Slot = st.s.slot.Name()
	}
	st.do(action{kind: actEmit, ev: ev})
}

func (st *stepper) set(state State, reason string) {
	s := st.s
	if s.state != state {
		s.since = st.now
	}
	s.state, s.reason = state, reason
	if state != StateBackoff {
		s.until = time.Time{}
	}
}

func (st *stepper) arm(t timerID, d time.Duration) { st.do(action{kind: actArm, timer: t, d: d}) }
func (st *stepper) disarm(t timerID)               { st.do(action{kind: actDisarm, timer: t}) }

func (st *stepper) step(in input) {
	s := st.s
	switch in.kind {
	case inBoot:
		if in.hasData {
			st.setData(in.data)
		}
		if s.standby() {
			st.set(StateStandby, "standby: waiting for leadership")
			st.emit(EventStandby, s.reason)
			return
		}
		st.register()
		st.tryStart()
	case inAdopted:
		st.adopted(in)
	case inStarted:
		st.started(in)
	case inStartFailed:
		st.emit(EventStartFailed, in.err.Error())
		st.after(Outcome{Cause: CauseStartFailed, Err: in.err, Started: st.now})
	case inExited:
		st.exited(in)
	case inHealth:
		if in.reset {
			// After a gap, a check seen critical now may just have been
			// re-registered: treat every check as newly seen.
			clear(s.tracks)
		}
		updateTracks(s.tracks, s.svc, s.id, in.states, st.now)
		st.evalHealth()
		st.maybeReleaseReload()
	case inData:
		st.dataChanged(in.data)
	case inTimer:
		st.timer(in.timer)
	case inTermGained:
		st.termGained(in.term)
	case inTermLost:
		st.termEnded(in.expired, in.why)
	case inTermExpired:
		s.expired = true
		st.escalate()
	case inSlotLost:
		st.slotLost(in.expired, in.why)
	case inSlotExpired:
		st.slotLost(true, "its deadline passed")
	case inDeregistered:
		st.deregistered()
	case inStop:
		st.stop()
	case inKill:
		s.kill = true
		if s.draining {
			s.draining = false
			st.disarm(timerDrain)
			st.do(action{kind: actStop, kill: true})
			s.killed = true
			return
		}
		st.escalate()
	case inRestart:
		st.do(action{kind: actReply, err: st.operatorRestart()})
	case inReset:
		st.do(action{kind: actReply, err: st.operatorReset()})
	case inReloadGranted:
		st.reloadGranted(in.seq)
	case inPause:
		st.pauseChanged(in.pause)
	}
}

func (st *stepper) register() {
	st.s.registered = true
	st.do(action{kind: actRegister, role: st.s.role()})
}

// setData keeps a data snapshot, without its one-shot events.
func (st *stepper) setData(d render.ServiceState) {
	d.Events = nil
	st.s.data, st.s.hasData = d, true
}

// permitted says whether the instance may run now, and if not, why. Each
// reason to run or not is one permit here.
func (st *stepper) permitted() (ok bool, state State, why string) {
	s := st.s
	switch {
	case s.shutdown:
		return false, StateStopping, "stopping"
	case s.slot != nil && s.slotLost != "":
		return false, StateStopped, s.slotLost
	case s.standby() && (s.term == nil || s.termLost):
		return false, StateStandby, "standby: waiting for leadership"
	case s.hasData && s.data.Failed != "":
		return false, StateFailed, s.data.Failed
	case s.hasData && !s.data.Ready():
		return false, StateWaiting, s.data.Waiting
	}
	return true, "", ""
}

// tryStart starts the process if every permit holds, else says what it
// waits for (and fails once a dependency's timeout has passed).
func (st *stepper) tryStart() {
	s := st.s
	if s.pid != 0 {
		return
	}
	ok, state, why := st.permitted()
	if !ok {
		switch state {
		case StateWaiting:
			if s.waitingSince.IsZero() {
				s.waitingSince = st.now
			}
			if reason, next := depTimeout(s.data, s.waitingSince, st.now); reason != "" {
				s.waitingSince = time.Time{}
				st.set(StateFailed, reason)
				st.emit(EventFailed, reason)
				return
			} else if next > 0 {
				st.arm(timerDep, next)
			}
			if s.state != StateWaiting || s.reason != why {
				st.set(StateWaiting, why)
				st.emit(EventWaiting, why)
			}
		case StateFailed:
			st.set(StateFailed, why)
			st.emit(EventFailed, why)
		default:
			st.set(state, why)
		}
		return
	}
	s.waitingSince = time.Time{}
	st.disarm(timerDep)
	env := startEnv(s)
	if s.hasData {
		s.depsAtStart = s.depsAtStart[:0]
		for _, d := range s.data.Deps {
			s.depsAtStart = append(s.depsAtStart, d.Satisfied)
		}
		clear(s.lostPending)
	}
	st.dropWaitingReload() // the new process reads every file anew
	st.set(StateStarting, "starting")
	st.do(action{kind: actStart, env: env})
}

// startEnv is what a start adds to the instance's base env.
func startEnv(s *instState) []string {
	env := append(leaderEnv(s.svc.Leader, s.term), slotEnv(s.slot, s.svc)...)
	if s.hasData {
		env = append(append(env, s.data.DepEnv...), s.data.TemplateEnv...)
	}
	return env
}

// restartAtOnce is decide's answer, given in advance, to the exit of the
// running process: ok when that exit, whatever its status (failureOnly:
// whatever status but a success), is answered by a start at once with env
// and nothing else decided first; as long as no other input comes before
// the exit, decide will say exactly that when it comes. The loop arms the
// process with it (proc.Process.Arm): the main thread reaps the process
// and forks the next at once, and the exit and the start come back as the
// usual inputs (inExited, then inStarted), the start being actStart's. It
// holds only under a restart block that answers any exit the same way
// (delay 0, attempts unlimited: a window then changes nothing) and in a
// state where nothing else is under way: no stop, drain, pause, reload or
// held health restart, every permit to run.
func restartAtOnce(s *instState) (ok, failureOnly bool, env []string) {
	r := s.svc.Restart
	switch {
	case s.pid == 0 || s.stopping || s.draining || s.shutdown || s.done:
		return false, false, nil
	case s.paused.Why != "" || s.reload != nil || s.nextReload != nil || s.healthHeld != "":
		return false, false, nil
	case r.Delay > 0 || r.Attempts > 0:
		return false, false, nil
	}
	switch r.Policy {
	case schema.RestartAlways:
	case schema.RestartOnFailure:
		failureOnly = true
	default:
		return false, false, nil
	}
	if ok, _, _ := (&stepper{s: s}).permitted(); !ok {
		return false, false, nil
	}
	return true, failureOnly, startEnv(s)
}

// adopted: the loop starts with the process the previous image of
// mariposa ran (an upgrade in place). It keeps running: registered again
// (the agent keeps its checks' states) with its restarts and its term.
func (st *stepper) adopted(in input) {
	s := st.s
	if in.hasData {
		st.setData(in.data)
	}
	s.restarts, s.lastEnd = in.restarts, in.why
	s.tracker.Restore(in.tracker)
	if in.pid == 0 {
		// No process: it stays in the state it waited in.
		st.register()
		switch in.idle {
		case StatePaused:
			// The pause's current state follows (inPause): a resume
			// starts it.
			s.paused = in.pause
			st.set(StatePaused, in.reason)
		case StateBackoff:
			st.set(StateBackoff, in.reason)
			s.until = in.until
			st.arm(timerStart, max(in.until.Sub(st.now), 0))
		default:
			st.set(in.idle, in.reason)
		}
		return
	}
	s.depsAtStart = append(s.depsAtStart[:0], in.depsAtStart...)
	if in.hasTerm {
		t := in.term
		s.term, s.termLost, s.expired = &t, false, false
	}
	s.pid, s.started = in.pid, in.started
	st.register()
	st.setRunning()
	st.emit(EventAdopted, s.reason)
	if in.hasData && len(in.data.Events) > 0 {
		// A template changed since the previous build rendered it
		// (render.Options.AfterUpgrade), before this first input.
		st.dataChanged(in.data)
	}
}

func (st *stepper) started(in input) {
	s := st.s
	s.pid, s.started = in.pid, in.started
	s.stopping, s.killed = false, false
	st.setRunning()
	st.emit(EventStarted, s.reason)
	st.maybeReleaseReload()
}

// setRunning writes the running state's reason.
func (st *stepper) setRunning() {
	s := st.s
	out := fmt.Sprintf("running (pid %d)", s.pid)
	if s.svc.Leader != nil {
		if r := s.role(); r != "" {
			out += " as " + r
		}
	}
	if s.restarts > 0 {
		times := "times"
		if s.restarts == 1 {
			times = "time"
		}
		out += fmt.Sprintf("; restarted %d %s, last after %s", s.restarts, times, s.lastEnd)
	}
	if r := s.reload; r != nil && !r.granted {
		out += "; " + r.why + ": waiting for a reload token"
	}
	st.set(StateRunning, out)
}

// withStderr adds the child's last stderr line to a reason: why a service
// failed is rarely in its exit status.
func withStderr(reason, stderr string) string {
	if stderr == "" {
		return reason
	}
	return reason + "; last stderr: " + strconv.Quote(stderr)
}

func (st *stepper) exited(in input) {
	s := st.s
	if in.pid != s.pid || s.pid == 0 {
		return // not ours (a stale report)
	}
	s.pid = 0
	s.stderr = in.stderr
	st.disarm(timerHealth)
	if !s.stopping {
		st.emit(EventExited, withStderr(in.exit.String(), in.stderr))
		st.after(Outcome{Cause: CauseExit, Exit: in.exit, Started: s.started})
		return
	}
	s.stopping, s.killed = false, false
	st.emit(EventStopped, in.exit.String())
	switch s.then {
	case thenShutdown:
		st.finishIfDone()
	case thenTermLost:
		st.termStopped()
	case thenOutcome:
		o := s.outcome
		o.Exit = in.exit
		st.after(o)
	case thenRestart:
		s.restarts++
		s.lastEnd = s.thenWhy
		st.tryStart()
	case thenWait:
		s.restarts++
		s.lastEnd = s.thenWhy
		st.tryStart()
	}
}

// stopProcess asks the loop to stop the process; then says what follows.
func (st *stepper) stopProcess(then afterStop, kill bool) {
	s := st.s
	s.then = then
	st.dropWaitingReload() // whatever starts next reads every file anew
	if s.stopping {
		if kill || s.expired || s.kill {
			st.escalate()
		}
		return
	}
	s.stopping = true
	s.killed = kill || s.expired || s.kill
	st.disarm(timerHealth)
	st.do(action{kind: actStop, kill: s.killed})
}

// escalate SIGKILLs a process that is being stopped, once.
func (st *stepper) escalate() {
	s := st.s
	if s.pid != 0 && s.stopping && !s.killed {
		s.killed = true
		st.do(action{kind: actKill})
	}
}

// after decides what follows the end of a run.
func (st *stepper) after(o Outcome) {
	s := st.s
	if s.shutdown {
		st.finishIfDone()
		return
	}
	d := s.tracker.Decide(o, st.now, st.jitter)
	switch d.Action {
	case ActionRestart:
		s.lastEnd = o.String()
		if s.paused.Why != "" {
			st.holdRestart()
			return
		}
		s.restarts++
		if d.Delay == 0 {
			st.emit(EventRestarting, withStderr(d.Reason, s.stderr))
			st.tryStart()
			return
		}
		st.set(StateBackoff, withStderr(d.Reason, s.stderr))
		s.until = st.now.Add(d.Delay)
		st.emit(EventRestarting, s.reason)
		st.arm(timerStart, d.Delay)
	case ActionFail:
		st.set(StateFailed, withStderr(d.Reason, s.stderr))
		st.emit(EventFailed, s.reason)
		if s.term != nil && s.standby() && !s.gaveUp {
			// A leader that cannot run hands the lock to a standby.
			s.gaveUp = true
			st.emit(EventLeaderResigned, "restarts exhausted")
			st.do(action{kind: actStopElecting})
		}
	case ActionDone:
		st.set(StateCompleted, withStderr(d.Reason, s.stderr))
		st.emit(EventCompleted, s.reason)
	}
}

func (st *stepper) evalHealth() {
	s := st.s
	if s.pid == 0 || s.stopping || !s.svc.Restart.OnUnhealthy || s.svc.Restart.Policy == schema.RestartNever {
		return
	}
	name, recheck := unhealthyCheck(s.tracks, s.started, s.svc.Restart, st.now)
	if name == "" {
		if recheck > 0 {
			st.arm(timerHealth, recheck)
		}
		return
	}
	if s.paused.Why != "" {
		if s.healthHeld == "" {
			s.healthHeld = fmt.Sprintf("check %q critical", name)
			st.emit(EventPaused, "paused: would restart: "+s.healthHeld+" ("+s.paused.Why+")")
		}
		return
	}
	s.healthHeld = ""
	why := fmt.Sprintf("check %q critical; restarting", name)
	st.set(StateStarting, why)
	st.emit(EventUnhealthy, why)
	s.outcome = Outcome{Cause: CauseUnhealthy, Check: name, Started: s.started}
	st.stopProcess(thenOutcome, false)
}

// dataChanged applies what changed in the service's Consul data: a start
// that was waiting, template change_mode actions, and on_lost.
func (st *stepper) dataChanged(d render.ServiceState) {
	s := st.s
	events := d.Events
	st.setData(d)
	if s.pid == 0 {
		// Not running: only a wait can move on (the next start reads the
		// files anew), or a template that cannot work fails the service.
		if s.state == StateWaiting {
			st.tryStart()
		}
		return
	}
	if s.stopping {
		return // the next start sees the new data
	}
	restart, coordRestart := "", ""
	var signals, coordSignals []syscall.Signal
	for _, ev := range events {
		t := ev.Template
		st.emit(EventRendered, ev.Destination)
		if coordinated(t) && !s.ungated {
			// Paced across the fleet: after a reload token (reload.go).
			if t.ChangeMode == "signal" && !t.Env {
				coordSignals = append(coordSignals, t.Signal)
			} else {
				coordRestart = "template " + ev.Destination + " changed"
			}
			continue
		}
		switch {
		case t.Env || t.ChangeMode == "restart" || t.ChangeMode == "":
			restart = "template " + ev.Destination + " changed"
		case t.ChangeMode == "signal":
			if !slices.Contains(signals, t.Signal) {
				signals = append(signals, t.Signal)
			}
		case t.ChangeMode == "command":
			st.do(action{kind: actChangeCommand, tmpl: t})
		}
	}
	// on_lost, against what held when the process started.
	for i, dep := range d.Deps {
		if i >= len(s.depsAtStart) {
			break
		}
		switch dep.Dep.OnLost {
		case "stop":
			if s.depsAtStart[i] && !dep.Satisfied {
				why := "dependency " + dep.Dep.Name + " lost; stopping until it is back"
				st.set(StateStarting, why)
				st.emit(EventDependencyLost, why)
				s.thenWhy = "dependency " + dep.Dep.Name + " lost"
				st.stopProcess(thenWait, false)
				return
			}
		case "restart":
			if s.depsAtStart[i] && !dep.Satisfied {
				s.lostPending[i] = true
			} else if s.lostPending[i] && dep.Satisfied {
				restart = "dependency " + dep.Dep.Name + " came back"
			}
		}
	}
	if restart != "" {
		st.restartNow(restart)
		return
	}
	for _, sig := range signals {
		st.emit(EventSignalled, proc.SignalName(sig))
		st.do(action{kind: actSignal, sig: sig})
	}
	if coordRestart != "" || len(coordSignals) > 0 {
		st.askReload(d.Hashes, coordRestart, coordSignals)
	}
}

// restartNow stops the process and starts it again at once, outside the
// restart policy: a change, not a failure.
func (st *stepper) restartNow(why string) {
	st.set(StateStarting, why+"; restarting")
	st.emit(EventRestarting, why)
	st.s.thenWhy = why
	st.stopProcess(thenRestart, false)
}

func (st *stepper) timer(t timerID) {
	s := st.s
	switch t {
	case timerStart:
		if s.state == StateBackoff && s.paused.Why != "" {
			st.holdRestart()
		} else if s.state == StateBackoff {
			st.tryStart()
		}
	case timerDep:
		if s.state == StateWaiting {
			st.tryStart()
		}
	case timerHealth:
		st.evalHealth()
	case timerDrain:
		if s.draining {
			s.draining = false
			st.stopProcess(thenShutdown, s.kill)
		}
	case timerReload:
		st.maybeReleaseReload()
	}
}

// termGained: this instance leads. In standby mode it registers and starts;
// in tag mode it re-registers with the leader tag and applies change_mode.
func (st *stepper) termGained(t termInfo) {
	s := st.s
	if s.shutdown {
		st.do(action{kind: actReleaseTerm})
		return
	}
	if cur := s.term; cur != nil && !s.termLost && cur.Key == t.Key && cur.Session == t.Session {
		// The term an adopted process runs under, taken again by the
		// elector of this image with the same session: no change of role.
		s.term = &t
		return
	}
	s.term, s.termLost, s.expired = &t, false, false
	st.emit(EventLeaderAcquired, t.Key)
	st.register()
	if s.standby() {
		st.tryStart()
		return
	}
	st.roleChanged("became leader")
}

// roleChanged does what the leader block's change_mode says after a change
// of role in tag mode.
func (st *stepper) roleChanged(why string) {
	s := st.s
	if s.pid == 0 || s.stopping {
		return
	}
	switch s.svc.Leader.ChangeMode {
	case "signal":
		st.emit(EventSignalled, proc.SignalName(s.svc.Leader.Signal))
		st.do(action{kind: actSignal, sig: s.svc.Leader.Signal})
		st.setRunning()
	case "noop":
		st.setRunning()
	default:
		st.restartNow(why)
	}
}

// termEnded: the leader-only work stops first (at once if the term expired:
// the lock may be anyone's soon), then the registration follows, then the
// elector may go on.
func (st *stepper) termEnded(expired bool, why string) {
	s := st.s
	if s.term == nil {
		return
	}
	s.termLost = true
	s.expired = s.expired || expired
	st.emit(EventLeaderLost, why)
	if !s.standby() {
		// Tag mode: every instance runs; the leader's child stops being the
		// leader before the term is handed back.
		if s.svc.Leader.ChangeMode == "signal" || s.svc.Leader.ChangeMode == "noop" || s.pid == 0 {
			if s.pid != 0 && !s.stopping {
				st.roleChanged("leadership lost")
			}
			st.termStopped()
			return
		}
		if s.stopping {
			if s.expired {
				st.escalate()
			}
			// Whatever stop is under way ends the leader's run; hand the
			// term back then.
			if s.then != thenShutdown {
				s.then, s.thenWhy = thenTermLost, "leadership lost"
			}
			return
		}
		st.set(StateStarting, "leadership lost; restarting")
		s.thenWhy = "leadership lost"
		st.stopProcess(thenTermLost, s.expired)
		return
	}
	if s.shutdown {
		// mariposa is stopping, and ending its election ended the term.
		// The shutdown's own order stops the leader (deregister, drain,
		// stop signal), and finishIfDone hands the term back once the
		// process is gone. Only an expiry hurries it: the lock may be
		// anyone's soon.
		if s.expired && s.pid != 0 {
			if s.draining {
				s.draining = false
				st.disarm(timerDrain)
			}
			if s.stopping {
				st.escalate()
			} else {
				st.stopProcess(thenShutdown, true)
			}
		}
		st.finishIfDone()
		return
	}
	if s.pid != 0 {
		if s.then != thenShutdown || !s.stopping {
			st.stopProcess(thenTermLost, s.expired)
		} else if s.expired {
			st.escalate()
		}
		return
	}
	st.termStopped()
}

// termStopped: the leader-only work has stopped after the term ended.
func (st *stepper) termStopped() {
	s := st.s
	if s.standby() {
		st.disarm(timerStart)
		st.disarm(timerDep)
		if s.registered && !s.gaveUp && !s.shutdown {
			// Deregister before handing the term back, so two instances
			// are never registered as the leader at once.
			s.registered = false
			st.do(action{kind: actDeregister})
			st.set(StateStandby, "standby: waiting for leadership")
			return // inDeregistered hands the term back
		}
		st.releaseTerm()
		if !s.gaveUp && !s.shutdown {
			st.set(StateStandby, "standby: waiting for leadership")
		}
		if s.shutdown {
			st.finishIfDone()
		}
		return
	}
	// Tag mode: register as a follower; restart (change_mode restart) now
	// that the term is back.
	restart := s.then == thenTermLost && s.pid == 0 && !s.shutdown && s.svc.Leader.ChangeMode != "signal" && s.svc.Leader.ChangeMode != "noop"
	st.releaseTerm()
	if s.shutdown {
		st.finishIfDone()
		return
	}
	st.register()
	if restart {
		s.restarts++
		s.lastEnd = "leadership lost"
		st.tryStart()
	} else if s.pid != 0 {
		st.setRunning()
	}
}

func (st *stepper) releaseTerm() { st.releaseTermWithdrawing(false) }

// releaseTermWithdrawing hands the term back; withdraw: the release also
// removes the registration from the catalog.
func (st *stepper) releaseTermWithdrawing(withdraw bool) {
	s := st.s
	if s.term == nil {
		return
	}
	s.term, s.termLost, s.expired = nil, false, false
	s.then = thenOutcome
	st.do(action{kind: actReleaseTerm, withdraw: withdraw})
}

// stop begins the graceful stop: deregister, drain, stop signal, and
// SIGKILL after the timeout.
func (st *stepper) stop() {
	s := st.s
	if s.shutdown {
		return
	}
	s.shutdown = true
	for t := timerID(0); t < numTimers; t++ {
		st.disarm(t)
	}
	// Stop contending first, so that giving the term back releases the
	// lock instead of starting another round.
	st.do(action{kind: actStopElecting})
	st.set(StateStopping, "stopping")
	st.emit(EventStopping, "")
	if s.registered {
		s.registered = false
		st.do(action{kind: actDeregister})
	} else {
		s.deregistered = true
	}
	if s.pid != 0 && s.stopping {
		// A stop is under way already (a health restart, a lost term): it
		// becomes the final one.
		if s.then != thenTermLost {
			s.then = thenShutdown
		}
		if s.kill || s.expired {
			st.escalate()
		}
	}
	// Without a drain nothing waits on the deregistration: the stop signal
	// goes out with it (a leader's term goes back in finishIfDone).
	if s.deregistered || (s.pid != 0 && !s.stopping && s.svc.Stop.Drain == 0) {
		st.afterDeregister()
	}
}

func (st *stepper) deregistered() {
	s := st.s
	if s.shutdown {
		s.deregistered = true
		st.afterDeregister()
		return
	}
	// A standby that lost its term: now hand the term back.
	if s.termLost {
		st.releaseTerm()
	}
}

// afterDeregister drains, then stops the process.
func (st *stepper) afterDeregister() {
	s := st.s
	switch {
	case s.pid == 0:
		st.finishIfDone()
	case s.stopping:
		// Its exit finishes the stop.
	case s.svc.Stop.Drain > 0 && !s.kill && !s.expired:
		s.draining = true
		st.arm(timerDrain, s.svc.Stop.Drain)
	default:
		st.stopProcess(thenShutdown, s.kill)
	}
}

// finishIfDone ends a shutdown once nothing is left: no process, the
// deregistration returned, the term handed back.
//
// A leader's term goes back as soon as its process is gone. When the
// deregistration has not returned by then, the release withdraws the
// registration itself, in the transaction that unlocks the key: the catalog
// still never lists the old leader beside the new one, and the handover
// does not wait for the agent's catalog write (a Raft write of its own,
// about a fifth of a graceful handover on the benchmark's machine).
func (st *stepper) finishIfDone() {
	s := st.s
	if !s.shutdown || s.done || s.pid != 0 {
		return
	}
	if s.term != nil {
		st.releaseTermWithdrawing(!s.deregistered)
	}
	if !s.deregistered {
		return
	}
	s.done = true
	st.set(StateStopped, "stopped")
	st.emit(EventStoppedForGood, "")
	st.do(action{kind: actDone})
}

// operatorRestart: `mariposa restart SERVICE`.
func (st *stepper) operatorRestart() error {
	s := st.s
	switch {
	case s.shutdown:
		return fmt.Errorf("%s is stopping", s.svc.Name)
	case s.pid != 0:
		if !s.stopping {
			st.restartNow("restarted by an operator")
		}
		return nil
	case s.standby() && s.term == nil:
		return fmt.Errorf("%s is a standby: only the leader runs (key %s)", s.svc.Name, s.svc.Leader.Key)
	case s.state == StateFailed && s.gaveUp:
		return fmt.Errorf("%s gave up its leadership after exhausting its restarts; reload mariposa (SIGHUP) to contend again", s.svc.Name)
	}
	st.disarm(timerStart)
	st.emit(EventOperator, "restart")
	st.tryStart()
	return nil
}

// operatorReset: `mariposa reset SERVICE` clears the restart history and
// starts a failed or completed service again.
func (st *stepper) operatorReset() error {
	s := st.s
	if s.shutdown {
		return fmt.Errorf("%s is stopping", s.svc.Name)
	}
	if s.gaveUp {
		return fmt.Errorf("%s gave up its leadership after exhausting its restarts; reload mariposa (SIGHUP) to contend again", s.svc.Name)
	}
	s.tracker = *NewRestartTracker(s.svc.Restart)
	st.emit(EventOperator, "reset")
	if s.pid == 0 && (s.state == StateFailed || s.state == StateCompleted || s.state == StateBackoff) {
		st.disarm(timerStart)
		s.restarts = 0
		st.tryStart()
	}
	return nil
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

// slotLost: another node may hold the slot soon (at once after its
// deadline, if expired), so the process stops now, with SIGKILL if the
// deadline passed, and is not started again.
func (st *stepper) slotLost(expired bool, why string) {
	s := st.s
	if s.slot == nil || s.slotLost != "" {
		if expired {
			s.expired = true
			st.escalate()
		}
		return
	}
	s.expired = s.expired || expired
	reason := "slot " + s.slot.Name() + " lost"
	if why != "" {
		reason += ": " + why
	}
	s.slotLost = reason
	st.emit(EventSlotLost, reason)
	st.disarm(timerStart)
	st.disarm(timerDep)
	if s.pid != 0 {
		if s.then != thenShutdown || !s.stopping {
			s.thenWhy = reason
			st.stopProcess(thenWait, s.expired)
		} else if s.expired {
			st.escalate()
		}
		return
	}
	if !s.shutdown {
		st.set(StateStopped, reason)
	}
}

// slotEnv is MARIPOSA_INSTANCE and the slot's fencing token, for an
// instance in a count slot.
func slotEnv(sl *SlotInfo, svc *schema.Service) []string {
	if sl == nil {
		return nil
	}
	env := []string{"MARIPOSA_INSTANCE=" + strconv.Itoa(sl.Index), "MARIPOSA_SLOT_KEY=" + sl.Key,
		"MARIPOSA_SLOT_SESSION=" + sl.Session, "MARIPOSA_SLOT_INDEX=" + strconv.FormatUint(sl.Term, 10)}
	if sl.VolumeDir != "" && svc.Placement != nil {
		for _, v := range svc.Placement.Volumes {
			env = append(env, v.EnvName()+"="+filepath.Join(sl.VolumeDir, v.Path))
		}
	}
	return env
}

// leaderEnv is MARIPOSA_LEADER and friends for a leader service; t is the
// current term, nil when not leading.
func leaderEnv(b *schema.Leader, t *termInfo) []string {
	if b == nil {
		return nil
	}
	if t == nil {
		return []string{"MARIPOSA_LEADER=0", "MARIPOSA_LEADER_KEY=" + b.Key, "MARIPOSA_LEADER_SESSION=", "MARIPOSA_LEADER_INDEX="}
	}
	return []string{"MARIPOSA_LEADER=1", "MARIPOSA_LEADER_KEY=" + t.Key, "MARIPOSA_LEADER_SESSION=" + t.Session,
		"MARIPOSA_LEADER_INDEX=" + strconv.FormatUint(t.Index, 10)}
}
