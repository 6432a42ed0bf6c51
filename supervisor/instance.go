package supervisor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/cgroup"
	"github.com/mariposa-sh/mariposa/internal/leader"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/internal/report"
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
	StatePaused    State = "paused" // exited; the restart waits for the resume
)

// Snapshot is an instance's state for status output and tests.
type Snapshot struct {
	Service   string
	ServiceID string
	State     State
	PID       int
	Restarts  int
	Slot      string // "<unit>/<k>" for an instance in a count slot
	Output    string // the human reason
	Report    report.Instance
	// ChecksPassing: every check of the service is passing in the catalog,
	// as the node's health watch last saw it (true without checks).
	ChecksPassing bool
	// Held is what the instance would do but for a pause ("restart after
	// exit 1"): an entry of the node's queue. "" when nothing is held.
	Held string
	// LocalChecks: the service has checks and every one is an args check,
	// which mariposa runs itself and knows the result of before Consul
	// does. LocalPassingSince is then since when every one of them has
	// passed each run about the running process (the latest start of
	// their passing streaks, never before the process started); zero when
	// one is not passing or has no result about this process yet.
	LocalChecks       bool
	LocalPassingSince time.Time
}

// Instance supervises one service's process. One goroutine (run) owns its
// state and is the only place that acts: decide (decide.go) says what to
// do, run does it, and what completes later comes back as an input.
type Instance struct {
	svc    *schema.Service
	id     string
	node   string // the catalog node the service is registered under
	env    []string
	log    hclog.Logger
	reg    *checks.Registry
	sink   *proc.Sink
	data   *render.Reader // dependencies and templates; nil if none
	now    func() time.Time
	events func(Event)
	onLine func(proc.Line) // sees every output line (the log ring)
	// key names the instance within the runner (instanceKey): "web", or
	// "api/0" in a slot. onLine's lines carry it as their Name, so the
	// log ring of "api/0" is the one mariposa logs api/0 reads.
	key string

	// register (re-)registers the service; role is "", "leader" or
	// "follower" and picks the tags and meta of a leader service.
	register func(role string, st checks.Result)
	// elector contends for the leader lock; nil without a leader block.
	elector *leader.Elector
	// slot is the count slot the instance runs in; nil if none.
	slot *Slot
	// gate hands out the tokens of coordinated template reloads; nil: they
	// act at once, as without coordinate.
	gate ReloadGate

	health  chan checks.NodeHealth // latest-value mailbox
	changec chan *schema.Template  // change commands, run one at a time
	ops     chan opRequest         // operator requests
	pausec  chan Pause             // latest-value mailbox
	stopc   chan struct{}
	killc   chan struct{}
	// handc takes an upgrade's request to hand the instance over (upgrade.go);
	// adopt, when set, is what the previous image handed over.
	handc   chan handoverReq
	adopt   *InstanceHandoff
	killOne sync.Once
	stopOne sync.Once
	done    chan struct{}

	lastStderr atomic.Pointer[string] // the current child's last stderr line
	// abandoned, when set and true: another supervisor holds the node, so
	// the registration is not ours to withdraw.
	abandoned *atomic.Bool

	mu      sync.Mutex
	snap    Snapshot
	cur     *proc.Process
	scripts []*checks.ScriptCheck // the args checks, once run has made them

	// cgroups makes the instance's control group; nil: none (cgroups
	// unavailable; the process group is all there is).
	cgroups *cgroup.Manager
	// group is the instance's control group, made at the first start and
	// kept across restarts; only the loop touches it.
	group *cgroup.Group
	// oomBase is the group's OOM kill count when the process started.
	oomBase uint64

	// cred is who the service's processes run as (nil: mariposa's own
	// user); identErr why its user could not be found (the start fails).
	cred     *proc.Credential
	identErr error
}

type opRequest struct {
	kind  inputKind // inRestart | inReset
	by    string    // who asked (Event.Actor)
	reply chan error
}

func newInstance(svc *schema.Service, id string, env []string, log hclog.Logger, reg *checks.Registry, sink *proc.Sink,
	data *render.Reader, elector *leader.Elector, events func(Event), onLine func(proc.Line)) *Instance {
	in := &Instance{
		svc: svc, id: id, env: env, log: log.Named(svc.Name).With("service_id", id), reg: reg, sink: sink, data: data,
		elector: elector, events: events, onLine: onLine,
		now:     time.Now,
		health:  make(chan checks.NodeHealth, 1),
		changec: make(chan *schema.Template, 16),
		ops:     make(chan opRequest),
		pausec:  make(chan Pause, 1),
		stopc:   make(chan struct{}), killc: make(chan struct{}), done: make(chan struct{}), handc: make(chan handoverReq),
	}
	st := newInstState(svc, id, in.now())
	in.snap = snapshotOf(&st)
	return in
}

// inSlot makes in an instance in a count slot; before run.
func (in *Instance) inSlot(sl Slot) {
	in.slot = &sl
	st := newInstState(in.svc, in.id, in.now())
	st.slot = &sl.SlotInfo
	in.snap = snapshotOf(&st)
}

// Snapshot returns the current state.
func (in *Instance) Snapshot() Snapshot {
	in.mu.Lock()
	defer in.mu.Unlock()
	sn := in.snap
	if len(in.scripts) > 0 && len(in.scripts) == len(in.svc.Checks) {
		sn.LocalChecks = true
		if in.cur != nil && sn.State == StateRunning {
			locals := make([]time.Time, len(in.scripts))
			for i, sc := range in.scripts {
				locals[i] = sc.Local()
			}
			sn.LocalPassingSince = localSince(locals, in.cur.Started)
		}
	}
	return sn
}

// localSince is since when every args check has passed locally about a
// process started at started, given the starts of their local passing
// streaks (ScriptCheck.Local): the latest, zero when one is not passing
// or its streak began before the start (a result about the previous
// process that came before the new one's Kick was taken).
func localSince(locals []time.Time, started time.Time) time.Time {
	var since time.Time
	for _, t := range locals {
		if t.IsZero() || t.Before(started) {
			return time.Time{}
		}
		if t.After(since) {
			since = t
		}
	}
	return since
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
	in.stopOne.Do(func() { close(in.stopc) })
	<-in.done
}

// Kill makes a stop in progress skip its drain and grace period.
func (in *Instance) Kill() { in.killOne.Do(func() { close(in.killc) }) }

// operate hands an operator's request to the loop and waits for its answer.
func (in *Instance) operate(ctx context.Context, kind inputKind, by string) error {
	req := opRequest{kind: kind, by: by, reply: make(chan error, 1)}
	select {
	case in.ops <- req:
	case <-in.done:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func snapshotOf(s *instState) Snapshot {
	sn := Snapshot{Service: s.svc.Name, ServiceID: s.id, State: s.state, PID: s.pid, Restarts: s.restarts,
		Output: s.reason, Report: reportOf(s), ChecksPassing: checksPassing(s), Held: s.held()}
	if s.slot != nil {
		sn.Slot = s.slot.Name()
	}
	return sn
}

// checksPassing: every check of s's service has been seen passing.
func checksPassing(s *instState) bool {
	if len(s.tracks) != len(s.svc.Checks) {
		return false
	}
	for _, t := range s.tracks {
		if t.Status != "passing" {
			return false
		}
	}
	return true
}

func reportOf(s *instState) report.Instance {
	r := report.Instance{State: string(s.state), PID: s.pid, Restarts: s.restarts, Reason: s.reason,
		Version: s.svc.Version, Role: s.role(), Since: s.since, Until: s.until, LastExit: s.lastEnd, Stderr: s.stderr}
	if s.slot != nil {
		r.Slot, r.Term, r.Volumes = s.slot.Name(), s.slot.Term, s.slot.Volumes
	}
	return r
}

// loop is the effect side of one instance: the process, timers, the term
// and the goroutines that report back.
type loop struct {
	in     *Instance
	s      instState
	queue  []input
	p      *proc.Process
	timers [numTimers]*time.Timer
	gens   [numTimers]uint64 // a fire of a disarmed or re-armed timer is stale
	fired  chan timerFire
	back   chan inputKind  // completions of asynchronous effects
	kicks  []chan struct{} // the args checks': run now (a process started)

	published report.Instance

	// Leadership.
	term         *leader.Term
	termDone     chan struct{} // closed to let the elector's onTerm return
	termc        chan termMsg
	lostSeen     bool
	expiredSeen  bool
	stopElecting func()
	// adoptBy: a leader process handed over by an upgrade in place runs
	// under its term only until then, unless the elector of this image
	// has taken the term again (Runner.confirmHandedOver); zero otherwise.
	adoptBy time.Time

	reply chan error // the operator request being decided

	// Coordinated reloads: the token requests under way, by seq.
	reloads map[uint64]*reloadHold
	granted chan reloadGrant

	// stopDone, during a stop, closes once the stop's goroutine is done:
	// the group is empty, or its stop timeout passed and it was killed.
	stopDone chan struct{}
	// groupClear: the last reap found the control group empty (and its
	// OOM count read), so the next start need not look again: nothing
	// can enter an empty group but a process placed there from outside.
	groupClear bool

	// stderr holds the last stderr line of the process l.p (a slot of
	// its own for a process started at its predecessor's exit).
	stderr *atomic.Pointer[string]
	// The restart decided in advance (restartAtOnce): armed is the process
	// armed with it (proc.Process.Arm), with the env and condition it was
	// armed with, and the stderr slot of its successor. next is the
	// successor started at an exit and not yet taken by actStart (fired;
	// nextErr: its start error). holding: no arm (an upgrade's handover).
	armed       *proc.Process
	armedEnv    []string
	armedFO     bool
	armedStderr *atomic.Pointer[string]
	nextFired   bool
	next        *proc.Process
	nextErr     error
	nextEnv     []string
	nextStderr  *atomic.Pointer[string]
	holding     bool
	unarmable   *proc.Process // Arm refused it: not asked again
}

// reloadHold is a reload token asked for, and once granted, held.
type reloadHold struct {
	cancel  context.CancelFunc
	release func() // nil until granted
}

// reloadGrant hands a granted token from its goroutine to the loop.
type reloadGrant struct {
	seq     uint64
	release func()
}

// termMsg hands a new term from the elector's goroutine to the loop.
type termMsg struct {
	t    *leader.Term
	done chan struct{}
}

// newLoop makes the instance's loop, outside run: run's frame stays on the
// goroutine's stack for as long as the service runs, and each input-sized
// value in it (the loop's state alone is nearly 900 bytes, an input nearly
// 500) keeps that stack larger. Under 4 KB, the garbage collector shrinks
// an idle instance's stack to 8 KB; with the inputs and state built in run
// (9 KB) it stayed at 32 KB, the largest cost of an idle service.
func (in *Instance) newLoop() *loop {
	return &loop{in: in, s: newInstState(in.svc, in.id, in.now()), fired: make(chan timerFire, 64), back: make(chan inputKind, 4),
		reloads: map[uint64]*reloadHold{}, granted: make(chan reloadGrant), stderr: &in.lastStderr}
}

func (in *Instance) run() {
	defer close(in.done)
	l, w := in.setUp()
	for {
		l.drain()
		if l.s.done {
			break
		}
		w.wait(l)
	}
	w.tearDown(l)
}

// runWaits is what the instance's loop waits on between its steps, and what
// it stops when the instance ends. It lives on the heap, not in run's
// frame: an instance's goroutine parks in wait for as long as the service
// runs, and its stack is what that frame holds. run's frame was 3 KB, just
// too much for the runtime to shrink the stack from 16 KB to 8 KB (it does
// when less than a quarter is in use): 8 KB more per service, for nothing.
type runWaits struct {
	slotLost, slotExpired <-chan struct{}
	dataChanged           <-chan struct{}
	stopc, killc          <-chan struct{}
	adoptc                <-chan time.Time
	adoptTimer            *time.Timer
	stopScripts           context.CancelFunc
	scripts               sync.WaitGroup
	electorDone           chan struct{}
}

// setUp makes the instance's loop and starts what runs beside it (its args
// checks, the change commands' runner, the elector).
func (in *Instance) setUp() (*loop, *runWaits) {
	w := &runWaits{}
	l := in.newLoop()
	if in.slot != nil {
		l.s.slot = &in.slot.SlotInfo
		w.slotLost, w.slotExpired = in.slot.Lost, in.slot.Expired
	}
	l.s.ungated = in.gate == nil

	// args checks run for as long as the instance lives.
	scriptCtx, stopScripts := context.WithCancel(context.Background())
	w.stopScripts = stopScripts
	// The change commands' runner only where a template has one: an idle
	// goroutine is a stack for as long as the service runs.
	if slices.ContainsFunc(in.svc.Templates, func(t *schema.Template) bool { return t.ChangeMode == "command" }) {
		w.scripts.Add(1)
		go func() { defer w.scripts.Done(); in.changeCommands(scriptCtx.Done()) }()
	}
	var scs []*checks.ScriptCheck
	for _, c := range in.svc.Checks {
		if c.Kind != schema.CheckArgs {
			continue
		}
		kick := make(chan struct{}, 1)
		l.kicks = append(l.kicks, kick)
		sc := &checks.ScriptCheck{ServiceID: in.id, Check: c, Env: in.env, Dir: in.svc.Dir, Registry: in.reg, Log: in.log, Kick: kick, Cred: in.cred, NoNewPrivs: in.svc.NoNewPrivs}
		scs = append(scs, sc)
		w.scripts.Add(1)
		go func() { defer w.scripts.Done(); sc.Run(scriptCtx) }()
	}
	in.mu.Lock()
	in.scripts = scs
	in.mu.Unlock()
	l.queue = append(l.queue, l.boot())
	if in.data != nil {
		w.dataChanged = in.data.Changed()
		l.queue[0].data, l.queue[0].hasData = in.data.State(), true
	}

	// Leadership: the elector runs in its own goroutine and hands each term
	// to this loop, waiting until the loop has stopped the leader-only work.
	electCtx, stopElecting := context.WithCancel(context.Background())
	l.stopElecting = stopElecting
	w.electorDone = make(chan struct{})
	if in.elector != nil {
		l.termc = make(chan termMsg)
		go func() {
			defer close(w.electorDone)
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
		close(w.electorDone)
	}

	w.stopc, w.killc = in.stopc, in.killc
	if !l.adoptBy.IsZero() {
		w.adoptTimer = time.NewTimer(time.Until(l.adoptBy))
		w.adoptc = w.adoptTimer.C
	}
	return l, w
}

// tearDown, once the loop is done, disarms its timers, lets go of its
// reloads and stops what ran beside it; it returns when the lock is
// released and the checks have ended.
func (w *runWaits) tearDown(l *loop) {
	if w.adoptTimer != nil {
		w.adoptTimer.Stop()
	}
	for t := range l.timers {
		l.disarm(timerID(t))
	}
	for seq := range l.reloads {
		l.releaseReload(seq)
	}
	w.stopScripts()
	l.stopElecting()
	l.closeGroup()
	<-w.electorDone // lock released, session destroyed
	w.scripts.Wait()
}

// wait waits for the loop's next input and queues it. Each case hands what
// it received to a function of its own, so that wait's frame (parked for
// as long as the service runs) holds the select and little else: an input
// is some 500 bytes, and a composite literal per case would each take a
// slot of its own.
func (w *runWaits) wait(l *loop) {
	in := l.in
	var exited, lost, expired <-chan struct{}
	if l.p != nil {
		exited = l.p.Done()
	}
	if l.term != nil {
		if !l.lostSeen {
			lost = l.term.Lost()
		}
		if !l.expiredSeen {
			expired = l.term.Expired()
		}
	}
	select {
	case <-w.stopc:
		w.stopc = nil
		w.stopScripts()
		l.push(inStop)
	case <-w.killc:
		w.killc = nil
		l.push(inKill)
	case m := <-l.termc:
		w.adoptc = nil // the term is this image's own now, watched as any
		l.termGained(m)
	case <-lost:
		l.termLost()
	case <-expired:
		l.expiredSeen = true
		l.push(inTermExpired)
	case <-w.slotLost:
		w.slotLost = nil
		w.slotLostInput(l)
	case <-w.slotExpired:
		w.slotExpired = nil
		l.push(inSlotExpired)
	case <-w.adoptc:
		// The elector did not take the handed-over term again before
		// its last confirmation ran out: as the previous image's
		// watchdog would have, end it now.
		w.adoptc = nil
		if l.term == nil {
			l.adoptLapsed()
		}
	case <-exited:
		l.queueReaped()
	case h := <-in.health:
		l.healthInput(h)
	case <-w.dataChanged:
		l.dataInput()
	case f := <-l.fired:
		if l.timers[f.t] != nil && l.gens[f.t] == f.gen {
			l.timers[f.t] = nil
			l.timerInput(f.t)
		}
	case k := <-l.back:
		l.push(k)
	case g := <-l.granted:
		if h := l.reloads[g.seq]; h != nil && h.release == nil {
			h.release = g.release
			l.reloadGranted(g.seq)
		} else {
			go g.release() // no longer wanted
		}
	case op := <-in.ops:
		l.reply = op.reply
		l.opInput(op.kind, op.by)
	case p := <-in.pausec:
		l.pauseInput(p)
	case h := <-in.handc:
		l.handover(h)
	}
}

// The inputs wait queues, each built in a frame of its own (noinline: an
// inlined one would put its input back in wait's frame).

//go:noinline
func (l *loop) push(k inputKind) { l.queue = append(l.queue, input{kind: k}) }

//go:noinline
func (l *loop) termGained(m termMsg) {
	l.term, l.termDone, l.lostSeen, l.expiredSeen = m.t, m.done, false, false
	l.queue = append(l.queue, input{kind: inTermGained, term: termInfo{Key: m.t.Key, Session: m.t.Session, Index: m.t.Index}})
}

//go:noinline
func (l *loop) termLost() {
	l.lostSeen = true
	isExpired := false
	select {
	case <-l.term.Expired():
		isExpired, l.expiredSeen = true, true
	default:
	}
	why := ""
	if err := l.term.Err(); err != nil {
		why = err.Error()
	}
	l.queue = append(l.queue, input{kind: inTermLost, expired: isExpired, why: why})
}

//go:noinline
func (w *runWaits) slotLostInput(l *loop) {
	isExpired := false
	select {
	case <-w.slotExpired:
		isExpired, w.slotExpired = true, nil
	default:
	}
	why := ""
	if l.in.slot.Err != nil {
		if err := l.in.slot.Err(); err != nil {
			why = err.Error()
		}
	}
	l.queue = append(l.queue, input{kind: inSlotLost, expired: isExpired, why: why})
}

//go:noinline
func (l *loop) adoptLapsed() {
	l.queue = append(l.queue, input{kind: inTermLost, expired: true, why: "the leader term handed over by the upgrade was not confirmed again in time"})
}

//go:noinline
func (l *loop) queueReaped() { l.queue = append(l.queue, l.reap()) }

//go:noinline
func (l *loop) healthInput(h checks.NodeHealth) {
	l.queue = append(l.queue, input{kind: inHealth, states: h.Services[l.in.id], reset: h.Reset})
}

//go:noinline
func (l *loop) dataInput() {
	l.queue = append(l.queue, input{kind: inData, data: l.in.data.State()})
}

//go:noinline
func (l *loop) timerInput(t timerID) { l.queue = append(l.queue, input{kind: inTimer, timer: t}) }

//go:noinline
func (l *loop) reloadGranted(seq uint64) {
	l.queue = append(l.queue, input{kind: inReloadGranted, seq: seq})
}

//go:noinline
func (l *loop) opInput(k inputKind, by string) { l.queue = append(l.queue, input{kind: k, by: by}) }

//go:noinline
func (l *loop) pauseInput(p Pause) { l.queue = append(l.queue, input{kind: inPause, pause: p}) }

// openGroup makes (or finds again) the instance's control group and empties
// it: whatever is still in it is a stray of a previous process of this
// instance, or of a previous mariposa killed without its stop (its
// children were placed here and outlived it through setsid); it is
// killed before the new start, which waits for it (at most 5 s). A group
// that cannot be made fails the start: nothing runs outside its limits.
func (l *loop) openGroup() error {
	in := l.in
	if in.cgroups == nil {
		return nil
	}
	if l.stopDone != nil {
		<-l.stopDone // the last stop's strays have their timeout
		l.stopDone = nil
	}
	if l.groupClear {
		l.groupClear = false
		if in.group != nil && !in.group.Stale() {
			return nil // a restart: reap looked a moment ago
		}
	}
	if in.group == nil {
		g, err := in.cgroups.Group(groupName(in.node, in.id), resourcesOf(in.svc))
		if err != nil {
			return fmt.Errorf("control group: %w", err)
		}
		in.group = g
	}
	n, err := in.group.KillAll(5 * time.Second)
	if n > 0 {
		in.log.Warn("killed processes left in the instance's control group before starting it", "count", n, "group", in.group.Dirs()[0])
	}
	if err != nil {
		return fmt.Errorf("control group: %w", err)
	}
	in.oomBase = in.group.OOMKills()
	return nil
}

// groupName names an instance's control group by its node and its service
// ID: a slot's instance ID (api-0) is the same on every node, and several
// mariposas on one machine (a test fleet, a second supervisor on another
// Consul agent) must never take each other's groups for their own strays.
func groupName(node, id string) string {
	if node == "" {
		return id
	}
	return node + "." + id
}

// closeGroup, when the instance ends, kills what is left in its group and
// removes it.
func (l *loop) closeGroup() {
	in := l.in
	if l.stopDone != nil {
		<-l.stopDone
		l.stopDone = nil
	}
	if in.group == nil {
		return
	}
	if n, err := in.group.KillAll(5 * time.Second); err != nil || n > 0 {
		in.log.Debug("killed processes left in the instance's control group", "count", n, "error", err)
	}
	if err := in.group.Remove(); err != nil {
		in.log.Warn("could not remove the instance's control group", "error", err)
	}
	in.group = nil
}

// drain steps through the queue (outside run's frame: see newLoop).
func (l *loop) drain() {
	for len(l.queue) > 0 {
		next := l.queue[0]
		l.queue = l.queue[1:]
		l.step(next)
	}
}

// step decides on one input and carries out the actions.
func (l *loop) step(i input) {
	in := l.in
	// An armed process's successor waits while anything else is decided:
	// the restart decided in advance holds only until another input. If
	// the process exited and its successor started first, that exit is
	// the input before this one.
	if l.armed != nil && l.armed == l.p && l.p.Hold() {
		l.queue = append([]input{i}, l.queue...)
		i = l.reap()
	}
	var acts []action
	l.s, acts = decide(l.s, i, in.now(), rand.Float64())
	// Fork first: a restart's events, logs and Consul updates are decided
	// before the start but need not delay it (the restart benchmark's
	// overhead over a bare fork+exec+wait). Every other action keeps its
	// order, and none of them has to precede a start.
	var outcome []input
	for _, a := range acts {
		if a.kind == actStart {
			outcome = append(outcome, l.start(a.env))
		}
	}
	for _, a := range acts {
		if a.kind != actStart {
			l.act(a)
		}
	}
	// The start's outcome is the next input, before anything else.
	l.queue = append(outcome, l.queue...)
	if l.nextFired {
		// decide did not take the successor it had said it would: not
		// expected. It goes, as a start nobody asked for.
		in.log.Warn("a process started at its predecessor's exit was not wanted; killing it")
		l.dropNext()
	}
	l.rearm()
	l.publish()
}

// rearm arms the running process with decide's restart in advance
// (restartAtOnce), re-arms it when that changed, lets it go on (Release)
// when it did not, or disarms it.
func (l *loop) rearm() {
	p := l.p
	if l.armed != nil && l.armed != p {
		l.armed = nil // reaped
	}
	ok, failureOnly, env := restartAtOnce(&l.s)
	ok = ok && p != nil && l.s.pid == p.Pid && !l.holding && p != l.unarmable
	if a := l.armed; a != nil {
		if ok && failureOnly == l.armedFO && slices.Equal(env, l.armedEnv) {
			a.Release()
			return
		}
		if a.Disarm() {
			return // exited meanwhile with its successor: reap takes both
		}
		l.armed = nil
	}
	if !ok {
		return
	}
	in := l.in
	if in.cgroups != nil && (in.group == nil || l.stopDone != nil) {
		return // the group must be opened (emptied) by a start of the loop's
	}
	spec, slot, err := l.spec(env)
	if err != nil {
		return
	}
	var ready func() bool
	if g := in.group; g != nil {
		spec.Group = g
		// Nothing of the last run may be left in the group (reap would
		// kill it): else the loop's start empties it first.
		ready = func() bool {
			if empty, ok := g.Empty(); ok {
				return empty
			}
			pids, err := g.Procs()
			return err == nil && len(pids) == 0 && !g.Stale()
		}
	}
	if !p.Arm(&proc.Successor{Spec: spec, FailureOnly: failureOnly, Ready: ready}) {
		// Forks are not served on the main thread (tests), the PID 1
		// reaper waits for every child, or no pidfd: not for this process.
		l.unarmable = p
		return
	}
	l.armed, l.armedEnv, l.armedFO, l.armedStderr = p, env, failureOnly, slot
}

// dropNext kills a successor decide did not take and waits for its exit.
func (l *loop) dropNext() {
	if l.next != nil {
		_ = l.next.Signal(syscall.SIGKILL)
		<-l.next.Done()
	}
	l.nextFired, l.next, l.nextErr, l.nextEnv, l.nextStderr = false, nil, nil, nil, nil
}

// publish writes the state where it is read: the snapshot, and the
// supervisor check (with the state as data, internal/report).
func (l *loop) publish() {
	in := l.in
	r := reportOf(&l.s)
	in.mu.Lock()
	in.snap = snapshotOf(&l.s)
	in.cur = l.p
	in.mu.Unlock()
	if r == l.published {
		return
	}
	l.published = r
	if l.s.registered {
		in.reg.SetStatus(in.id, checks.Result{Health: l.s.health(), Output: report.Encode(r)})
	}
}

func (l *loop) act(a action) {
	in := l.in
	switch a.kind {
	case actRegister:
		in.register(a.role, checks.Result{Health: l.s.health(), Output: report.Encode(reportOf(&l.s))})
	case actDeregister:
		if in.abandoned != nil && in.abandoned.Load() {
			l.queue = append(l.queue, input{kind: inDeregistered})
			return
		}
		go func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
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
			l.back <- inDeregistered
		}()
	case actStart:
		l.queue = append([]input{l.start(a.env)}, l.queue...)
	case actStop:
		l.stop(a.kill)
	case actKill:
		if l.p != nil {
			_ = l.p.Signal(syscall.SIGKILL)
		}
	case actSignal:
		if l.p != nil {
			_ = l.p.SignalMain(a.sig)
		}
	case actArm:
		l.arm(a.timer, a.d)
	case actDisarm:
		l.disarm(a.timer)
	case actChangeCommand:
		in.runChangeCommand(a.tmpl)
	case actStopElecting:
		l.stopElecting()
	case actReleaseTerm:
		// Not when another supervisor took the node: the registration
		// under this ID is its own now.
		if a.withdraw && l.term != nil && (in.abandoned == nil || !in.abandoned.Load()) {
			l.term.ReleaseAlso(api.TxnOps{{Service: &api.ServiceTxnOp{Verb: api.ServiceDelete, Node: in.node,
				Service: api.AgentService{ID: in.id, Service: in.svc.Name}}}})
		}
		if l.termDone != nil {
			close(l.termDone)
		}
		l.term, l.termDone = nil, nil
	case actEmit:
		if in.events != nil {
			in.events(a.ev)
		}
	case actReply:
		if l.reply != nil {
			l.reply <- a.err
			l.reply = nil
		}
	case actAcquireReload:
		l.acquireReload(a.seq, a.reload)
	case actReleaseReload:
		l.releaseReload(a.seq)
	case actDone:
	}
}

// acquireReload asks the gate for a reload token off the loop; the grant
// comes back as inReloadGranted. Without a gate it is granted at once.
func (l *loop) acquireReload(seq uint64, req ReloadRequest) {
	in := l.in
	if in.gate == nil { // not asked for without a gate (ungated); granted if it were
		l.reloads[seq] = &reloadHold{cancel: func() {}, release: func() {}}
		l.queue = append([]input{{kind: inReloadGranted, seq: seq}}, l.queue...)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.reloads[seq] = &reloadHold{cancel: cancel}
	granted := l.granted
	go func() {
		release, err := acquireRetrying(ctx, in.gate, req, in.log)
		if err != nil {
			return // no longer wanted
		}
		select {
		case granted <- reloadGrant{seq: seq, release: release}:
		case <-ctx.Done():
			release()
		}
	}()
}

// releaseReload gives back request seq's token, or stops asking for it.
func (l *loop) releaseReload(seq uint64) {
	h := l.reloads[seq]
	if h == nil {
		return
	}
	delete(l.reloads, seq)
	h.cancel()
	if h.release != nil {
		go h.release() // Consul round trips: never on the loop
	}
}

// acquireRetrying asks gate for req's token until it is granted or ctx
// ends: a Consul that cannot be reached holds the reload back (nothing
// restarts because Consul is away), it does not let it through.
func acquireRetrying(ctx context.Context, gate ReloadGate, req ReloadRequest, log hclog.Logger) (func(), error) {
	wait := 500 * time.Millisecond
	for {
		release, err := gate.Acquire(ctx, req)
		if err == nil {
			return release, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.Warn("could not take a reload token; trying again", "hash", req.Hash, "error", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// start forks the process and returns the outcome: the next input, to be
// handled before anything else. A successor the main thread started at
// its predecessor's exit (rearm) is this start, when decide asks for it as
// it said it would.
func (l *loop) start(extra []string) input {
	in := l.in
	if l.nextFired {
		if slices.Equal(extra, l.nextEnv) {
			p, err, slot := l.next, l.nextErr, l.nextStderr
			l.nextFired, l.next, l.nextErr, l.nextEnv, l.nextStderr = false, nil, nil, nil, nil
			if err != nil {
				return input{kind: inStartFailed, err: err}
			}
			return l.started(p, slot)
		}
		l.dropNext()
	}
	empty := ""
	in.lastStderr.Store(&empty)
	spec, _, err := l.spec(extra)
	spec.Tap = in.tap
	if err != nil {
		return input{kind: inStartFailed, err: err}
	}
	if err := l.openGroup(); err != nil {
		return input{kind: inStartFailed, err: err}
	}
	if in.group != nil {
		spec.Group = in.group
	}
	p, err := proc.Start(spec)
	if err != nil {
		return input{kind: inStartFailed, err: err}
	}
	return l.started(p, &in.lastStderr)
}

// spec is the service's main process with extra added to its env; its
// output's last stderr line goes to slot.
func (l *loop) spec(extra []string) (spec proc.Spec, slot *atomic.Pointer[string], err error) {
	in := l.in
	env := in.env
	if len(extra) > 0 {
		env = dedupeEnv(append(append([]string{}, in.env...), extra...))
	}
	slot = new(atomic.Pointer[string])
	spec = proc.Spec{Argv: in.svc.Command, Dir: in.svc.Dir, Env: env, Output: in.sink, Name: in.svc.Name,
		Tap: func(line proc.Line) { in.tapInto(slot, line) }}
	in.asService(&spec, true)
	if in.identErr != nil {
		return spec, nil, &proc.StartError{Err: in.identErr, Permanent: true}
	}
	return spec, slot, nil
}

// started makes p the process and returns its start as the next input.
func (l *loop) started(p *proc.Process, stderr *atomic.Pointer[string]) input {
	l.p, l.stderr = p, stderr
	// The args checks run now, about this process, rather than leave the
	// previous one's status in Consul for up to an interval.
	for _, k := range l.kicks {
		select {
		case k <- struct{}{}:
		default: // a run is already due
		}
	}
	return input{kind: inStarted, pid: p.Pid, started: p.Started}
}

// tap sees each output line of the child as it is read.
func (in *Instance) tap(line proc.Line) { in.tapInto(&in.lastStderr, line) }

// tapInto is tap with the last stderr line kept in slot.
func (in *Instance) tapInto(slot *atomic.Pointer[string], line proc.Line) {
	if line.Stream == "stderr" && line.Text != "" {
		t := line.Text
		slot.Store(&t)
	}
	if in.onLine != nil {
		if in.key != "" {
			line.Name = in.key
		}
		in.onLine(line)
	}
}

// reap turns the exit of the process into an input.
func (l *loop) reap() input {
	p := l.p
	l.p = nil
	e := p.Exit()
	if l.armed == p {
		l.armed = nil
		// The main thread reaped it and may have started its successor
		// already (rearm): with the env decide gave in advance.
		if next, fired, err := p.Next(); fired {
			l.nextFired, l.next, l.nextErr, l.nextEnv, l.nextStderr = true, next, err, l.armedEnv, l.armedStderr
		}
	}
	if g := l.in.group; g != nil {
		if n := g.OOMKills(); n > l.in.oomBase {
			e.OOMKilled, l.in.oomBase = true, n
		}
	}
	// Whatever the child left in its group goes with it; during a stop,
	// its control group gets the rest of the stop timeout (see stop). The
	// successor started at the exit found the group empty (rearm's ready).
	_ = p.Signal(syscall.SIGKILL)
	if g := l.in.group; g != nil && l.stopDone == nil && !l.nextFired {
		pids, err := g.Procs()
		if len(pids) > 0 {
			_ = g.Kill()
		}
		l.groupClear = err == nil && len(pids) == 0
	}
	// Its last words may still be in the pipe: wait for them briefly.
	select {
	case <-p.OutputDone():
	case <-time.After(20 * time.Millisecond):
	}
	stderr := ""
	if s := l.stderr.Load(); s != nil {
		stderr = *s
	}
	return input{kind: inExited, pid: p.Pid, exit: e, stderr: stderr}
}

// stop sends the stop signal to the group and SIGKILLs it after the
// timeout (at once with kill); the exit comes back through reap.
func (l *loop) stop(kill bool) {
	p := l.p
	if p == nil {
		return
	}
	g := l.in.group
	if kill {
		_ = p.Signal(syscall.SIGKILL)
		if g != nil {
			_ = g.Kill()
		}
		return
	}
	sig, timeout := l.in.svc.Stop.Signal, l.in.svc.Stop.Timeout
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	_ = p.Signal(sig)
	// Every process of the control group gets the stop signal and the stop
	// timeout, then SIGKILL (systemd's KillMode=control-group).
	var pids []int
	if g != nil {
		pids, _ = g.Procs()
		for _, pid := range pids {
			if pid != p.Pid {
				_ = syscall.Kill(pid, sig)
			}
		}
	}
	done := make(chan struct{})
	if l.stopDone == nil {
		l.stopDone = done
	}
	go func() {
		defer close(done)
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-p.Done():
		case <-t.C:
			l.in.log.Warn("stop timeout; killing the process group", "pid", p.Pid, "timeout", timeout)
			_ = p.Signal(syscall.SIGKILL)
			if g != nil {
				_ = g.Kill()
			}
			return
		}
		if g == nil {
			return
		}
		for tick := time.NewTicker(10 * time.Millisecond); ; {
			if left, err := g.Procs(); err != nil || len(left) == 0 {
				tick.Stop()
				return
			}
			select {
			case <-tick.C:
				continue
			case <-t.C:
				l.in.log.Warn("stop timeout; killing the control group", "pid", p.Pid, "timeout", timeout)
			}
			tick.Stop()
			_ = g.Kill()
			return
		}
	}()
}

// timerFire is a timer's report; gen tells a stale one.
type timerFire struct {
	t   timerID
	gen uint64
}

func (l *loop) arm(t timerID, d time.Duration) {
	l.disarm(t)
	l.gens[t]++
	fired, f := l.fired, timerFire{t: t, gen: l.gens[t]}
	l.timers[t] = time.AfterFunc(d, func() {
		select {
		case fired <- f:
		default: // only stale fires can fill the buffer: the loop reads on
		}
	})
}

func (l *loop) disarm(t timerID) {
	if l.timers[t] != nil {
		l.timers[t].Stop()
		l.timers[t] = nil
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
		spec := proc.Spec{Argv: t.Command, Dir: in.svc.Dir, Env: in.env, Output: in.sink, Name: in.svc.Name + ".change"}
		in.asService(&spec, false)
		p, err := proc.Start(spec)
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

// setPause hands the instance its pause state (latest value wins).
func (in *Instance) setPause(p Pause) {
	for {
		select {
		case in.pausec <- p:
			return
		default:
		}
		select {
		case <-in.pausec:
		default:
		}
	}
}
