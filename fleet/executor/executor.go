package executor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/lease"
)

// Defaults for Config.
const (
	DefaultService   = "mariposa"
	DefaultTTL       = 10 * time.Second
	DefaultLockDelay = time.Second
	DefaultRequest   = 5 * time.Second
)

// watchEvery: a watch asks again no sooner than this after its last answer,
// so a burst of changes reaches the node as a few answers (fleet/sim's
// watchEvery).
const watchEvery = 100 * time.Millisecond

// Instances runs the slots' instances. Its methods are called from the
// executor's loop only and must return at once; the runner reports what
// happens later with Executor.InstanceStarted and InstanceExited (an exit
// after Stop, or a Kill: the process is gone).
type Instances interface {
	// Start the slot's instance with its fencing token (Index: the slot
	// key's ModifyIndex, MARIPOSA_SLOT_INDEX) and the session holding it.
	Start(s agent.Start)
	// Stop the slot's instance; Kill: at once (SIGKILL), the hold is lost.
	Stop(slot agent.SlotID, kill bool)
	// A version written by mariposa deploy is "<name>/<n>": the unit's
	// definition in spec n of deployment name; cluster.ReadUnitAt reads
	// it with one read of that spec's (immutable) key (cluster.UnitOf,
	// the pure part). Nothing reads the deploy/ prefix whole.
	//
	// Update the slot's instance in place (agent.Update): stop it and
	// start u.To with the same fencing token and session; InstanceStarted
	// once the new one runs, InstanceHealthy once it passes its checks.
	Update(u agent.Update)
}

// Faults break the executor or its agent on purpose, for tests only.
type Faults struct {
	Agent agent.Faults
	// LoseClaimAnswer: a claim Consul applied is reported as an answer
	// lost (a transport error after the commit).
	LoseClaimAnswer func(agent.SlotID) bool
	// NoDeployCAS: the judge's record move without its check-index.
	NoDeployCAS bool
	// BeforeMove runs before a record move is sent, in its goroutine (it
	// may block: a slow request).
	BeforeMove func(agent.MoveDeployment)
	// Stepped sees every input the loop steps the agent with, in order
	// (tests: what the agent was told). NoResume: a watch that broke and
	// answers again is not reported (agent.WatchResumed).
	Stepped  func(in any)
	NoResume bool
	// MembersStale: the members watch posts its first answer only (a
	// watch that lags: a node registered since is not in it).
	MembersStale bool
	// ControlStale: the control watch posts its first answer only.
	ControlStale bool
	// AnsweredLate: a unit index watch marks its answers' units as
	// waiting for the loop's word after posting them, once the loop has
	// given its word (at most a second): the order that erased it.
	AnsweredLate bool
	// NoFreshRead: a units change takes effect at once, on the members
	// and the controls as their watches last said (fresh.go).
	NoFreshRead bool
}

// Config is one node's executor.
type Config struct {
	// Client talks to the node's Consul agent.
	Client *api.Client
	// SuccessorPasses, when set, replaces the health queries by which a
	// drain's handoff waits for the slot's new instances to pass
	// (AwaitSuccessor): it returns once they pass (or ctx ends). For
	// instances Consul does not know (tests' fakes).
	SuccessorPasses func(ctx context.Context, slot agent.SlotID, services []string)
	// Node is the node's Consul node name (the session's node and the
	// agent's name in placement).
	Node string
	// Checks are the node checks the session is bound to (Consul
	// invalidates it when one goes critical). Default: serfHealth.
	// mariposa adds its liveness check ("mariposa-<node>:mariposa").
	Checks []string
	// Service is the fleet's service in the catalog (default "mariposa"):
	// its members are the fleet's nodes, those not passing are failing.
	Service string
	// TTL of the session (default 10 s, renewed every TTL/2) and its lock
	// delay (default 1 s), from which every safety bound derives.
	TTL       time.Duration
	LockDelay time.Duration
	// Detect is the agent's failure-detection floor D (internal/holdrule);
	// 0: the local agent's own (lease.AgentTiming: its LAN gossip
	// suspicion_mult x probe_interval), the strict rule when it cannot be
	// read; negative: the strict rule.
	Detect time.Duration
	// Step is the rank spacing (default placement.DefaultStep).
	Step time.Duration
	// Seed of the agent's claim jitter (0: random).
	Seed uint64
	// Request bounds each non-blocking request (default 5 s); a
	// confirmation is bounded by the lock delay.
	Request time.Duration
	// Control: the operator's controls are on (agent.Config.Control): the
	// executor watches control/ and the agent claims nothing before its
	// first answer.
	Control bool
	// Buckets bounds the units' watches (pool.go): at most this many
	// buckets of three blocking queries each (default DefaultBuckets);
	// MaxRequests bounds the other requests at once (default
	// DefaultMaxRequests).
	Buckets     int
	MaxRequests int
	Instances   Instances
	Log         hclog.Logger
	Faults      Faults
	// Volumes performs the volumes' actions (volumes.go): needed when a
	// unit has Volumes.
	Volumes *Volumes
	// OnClaim, if set, is told each claim of a slot this node makes: the
	// unit, and how long the slot was vacant as this node saw it
	// (the claim-delay metric; stats.go). Called from the
	// loop: it must return at once.
	OnClaim func(unit string, vacant time.Duration)
	// Adopt, when set, is what the previous image's executor handed over
	// (Handover) in an upgrade in place: its session and holds are taken
	// on, not created or claimed (adopt.go).
	Adopt *Handover
}

// Executor runs one node's agent.
type Executor struct {
	cfg Config
	ag  *agent.Agent
	log hclog.Logger

	inbox inbox
	ctx   context.Context // canceled when the loop ends
	stop  context.CancelFunc
	done  chan struct{}

	killOnce sync.Once
	killed   chan struct{}

	// Owned by the loop.
	timer     *time.Timer
	units     map[string]*unitWatch
	buckets   []*bucket
	unitNames []string
	// reqs: the places of the requests at once (pool.go).
	reqs     chan struct{}
	members  []string
	info     infoMap                       // the members' attributes and capacity (place.go)
	prevRead map[string]bool               // Sticky units whose previous holders were read (place.go)
	penHeard bool                          // the penalties' watch has answered (place.go)
	svcWatch map[string]context.CancelFunc // the watches of the services the units name (place.go)
	svcSeen  map[string]uint64             // each watched service's catalog index last stepped (ServiceIndex)
	failing  []string
	haveMem  bool
	haveFail bool
	memIndex uint64 // the members' newest answer's index (place.go)
	// fresh: the units change waiting for its fresh read (fresh.go).
	fresh    *pendingUnits
	freshSeq uint64
	nodesGen uint64
	sessions map[string]context.CancelFunc // sessions created, not known gone: their renewal and watch
	stopping bool
	stopDone []chan struct{}
	stopped  bool
	restores map[agent.SlotID]*restoreRun // volumes.go
	handed   map[agent.SlotID]uint64      // handoffs published: their generation (volumes.go)
	serving  int                          // 0 not yet, 1 waiting for the acknowledgements, 2 done
	vacant   map[agent.SlotID]time.Time   // claims sent: when their slot was first seen vacant (stats.go)
	unitsSet bool                         // SetUnits was stepped (stats.go)

	// snap: what the loop last published for Stats and Waiting (stats.go).
	snap atomic.Pointer[snapshot]
}

// Inputs of the loop that are not the agent's.
type (
	sessionGone struct{ id string }
	sessionMade struct {
		id  string
		err error
	}
	// sessionAns: the answer of an action sent under session.
	sessionAns struct {
		session string
		in      any
	}
	indexAns struct {
		unit string
		view *agent.SlotsView
	}
	deployAns struct {
		unit string
		view *agent.DeployView
	}
	vacancyMoved struct{ unit string }
	failingAns   struct{ nodes []string }
	setUnits     struct {
		units    []agent.Unit
		stopping bool // Halt
	}
	stopReq struct{ done chan struct{} }
	stopNow struct{}
)

// New returns a node's executor; Start runs it.
func New(cfg Config) *Executor {
	if cfg.Service == "" {
		cfg.Service = DefaultService
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.LockDelay <= 0 {
		cfg.LockDelay = DefaultLockDelay
	}
	if cfg.Request <= 0 {
		cfg.Request = DefaultRequest
	}
	if cfg.Buckets <= 0 {
		cfg.Buckets = DefaultBuckets
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	switch {
	case cfg.Detect == 0:
		// Consul's defaults (holdrule.DefaultDetect) are not the
		// cluster's: one tuned to detect failures faster invalidates a
		// cut-off holder's session sooner, and a D of 4 s then let an
		// exclusive instance run on past another's start (e2e
		// TestFleetMinorityPartitionDiesInTime, gossip at 900 ms).
		d, _, err := lease.AgentTiming(cfg.Client)
		if err != nil {
			log := cfg.Log
			if log == nil {
				log = hclog.NewNullLogger()
			}
			log.Warn("cannot read the agent's gossip timing: a Consul leader election ends every exclusive hold (strict rule)", "error", err)
			d = 0
		}
		cfg.Detect = d
	case cfg.Detect < 0:
		cfg.Detect = 0
	}
	if len(cfg.Checks) == 0 {
		cfg.Checks = []string{"serfHealth"}
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	adoptConfig(&cfg)
	ctx, cancel := context.WithCancel(context.Background())
	e := &Executor{cfg: cfg, log: cfg.Log, ctx: ctx, stop: cancel, done: make(chan struct{}), killed: make(chan struct{}),
		units: map[string]*unitWatch{}, sessions: map[string]context.CancelFunc{}, reqs: make(chan struct{}, cfg.MaxRequests)}
	e.inbox.ready = make(chan struct{}, 1)
	e.ag = agent.New(agent.Config{Node: cfg.Node, Step: cfg.Step, LockDelay: cfg.LockDelay, Seed: cfg.Seed,
		Detect: cfg.Detect, Faults: cfg.Faults.Agent, Control: cfg.Control, Adopt: e.agentAdopt(),
		TTL: cfg.TTL})
	return e
}

// Detect is the failure-detection floor D the agent's exclusive holds
// ride a Consul election with (internal/holdrule): Config.Detect, or the
// local agent's gossip floor read by New; 0 is the strict rule.
func (e *Executor) Detect() time.Duration { return e.cfg.Detect }

// Start runs the executor: its loop and the fleet's watches.
func (e *Executor) Start() {
	e.timer = time.NewTimer(time.Hour)
	e.timer.Stop()
	go e.watchMembers()
	go e.watchFailing()
	go e.watchPenalties()
	e.startAdopted()
	if e.cfg.Control {
		go e.watchControl()
	}
	go e.run()
}

// SetUnits gives the agent the units this node runs its part of (each a
// unit's whole count: the agent decides which slots are this node's).
func (e *Executor) SetUnits(units []agent.Unit) { e.inbox.post(setUnits{units: units}) }

// Halt: mariposa stops. Nothing is claimed from here on and every held
// slot's instance stops, its release saying "mariposa stopped" (not "unit
// removed", as SetUnits(nil) would); Stop then releases what is left and
// ends the executor.
func (e *Executor) Halt() { e.inbox.post(setUnits{stopping: true}) }

// InstanceStarted reports that the slot's instance runs.
func (e *Executor) InstanceStarted(slot agent.SlotID) {
	e.inbox.post(agent.InstanceStarted{Slot: slot})
}

// InstanceHealthy reports that the slot's instance, running version,
// passes its checks; since, when not zero, is when they passed where they
// run (agent.InstanceHealthy's Since: min_healthy_time counts from there).
func (e *Executor) InstanceHealthy(slot agent.SlotID, version string, since time.Time) {
	e.inbox.post(agent.InstanceHealthy{Slot: slot, Version: version, Since: since})
}

// InstanceUnhealthy reports that the slot's instance, running version and
// reported healthy, is not any more (a break, or a restart): its
// min_healthy_time counts again (agent.InstanceUnhealthy).
func (e *Executor) InstanceUnhealthy(slot agent.SlotID, version string) {
	e.inbox.post(agent.InstanceUnhealthy{Slot: slot, Version: version})
}

// InstanceExited reports that the slot's instance is gone.
func (e *Executor) InstanceExited(slot agent.SlotID) { e.inbox.post(agent.InstanceExited{Slot: slot}) }

// Done is closed when the executor has ended.
func (e *Executor) Done() <-chan struct{} { return e.done }

// Stop ends the executor gracefully: every instance stopped, its slot
// released, the session destroyed. When ctx ends first, what is left is
// killed and the session destroyed anyway (its keys then wait out the
// lock delay). It returns once the executor has ended.
func (e *Executor) Stop(ctx context.Context) error {
	done := make(chan struct{})
	e.inbox.post(stopReq{done: done})
	select {
	case <-done:
		<-e.done
		return nil
	case <-e.done:
		return nil
	case <-ctx.Done():
		e.inbox.post(stopNow{})
		<-e.done
		return ctx.Err()
	}
}

// Kill ends the executor as a crash would: nothing released, the session
// left to Consul (its TTL, its checks), the instances left as they are.
func (e *Executor) Kill() {
	e.killOnce.Do(func() { close(e.killed) })
	<-e.done
}

// run is the loop: the only goroutine that steps the agent.
func (e *Executor) run() {
	defer close(e.done)
	defer e.stop()
	e.step(e.firstInput())
	e.publishState()
	for {
		select {
		case <-e.killed:
			return
		case <-e.inbox.ready:
		case <-e.timer.C:
			e.step(agent.Tick{})
		}
		for _, in := range e.inbox.take() {
			e.handle(in)
			if e.stopped {
				return
			}
		}
		e.publishState()
		if e.stopping && len(e.ag.Held()) == 0 && e.servedHandoffs() {
			e.finish()
			return
		}
	}
}

// finish destroys the sessions and ends the loop (graceful).
func (e *Executor) finish() {
	ids := make([]string, 0, len(e.sessions))
	for id := range e.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e.sessions[id]()
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Request)
		if _, err := e.cfg.Client.Session().Destroy(id, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			e.log.Warn("cannot destroy the session: Consul invalidates it at its TTL", "session", id, "error", err)
		}
		cancel()
	}
	for _, d := range e.stopDone {
		close(d)
	}
	e.stopped = true
}

func (e *Executor) handle(in any) {
	switch in := in.(type) {
	case setUnits:
		if e.stopping {
			return
		}
		e.unitsChange(in) // fresh.go
	case freshRead:
		e.freshRead(in)
	case stopReq:
		e.stopDone = append(e.stopDone, in.done)
		if !e.stopping {
			e.stopping = true
			e.step(agent.UnitsAnswer{Stopping: true})
		}
	case stopNow:
		for id := range e.ag.Held() {
			e.cfg.Instances.Stop(id, true)
		}
		e.finish()
	case sessionMade:
		if in.err == nil {
			e.startSession(in.id)
		}
		e.step(agent.SessionCreated{ID: in.id, Err: in.err})
	case sessionGone:
		if cancel, ok := e.sessions[in.id]; ok {
			cancel()
			delete(e.sessions, in.id)
		}
		if in.id == e.ag.Session() {
			e.log.Warn("session lost", "session", in.id)
			e.step(agent.SessionLost{})
		}
	case sessionAns:
		if in.session != e.ag.Session() {
			return // sent under a session the agent no longer has
		}
		e.step(in.in)
	case deployAns:
		w := e.units[in.unit]
		if w == nil {
			return
		}
		e.step(agent.DeployAnswer{View: in.view})
		if !w.deployed {
			w.deployed = true
			if early := w.early; early != nil && e.indexMayStep(w) {
				w.early = nil
				e.handle(*early)
			}
		}
	case indexAns:
		w := e.units[in.unit]
		if w == nil {
			return
		}
		if !e.indexMayStep(w) {
			w.early = &in
			return
		}
		e.step(agent.SlotsAnswer{View: in.view})
		now := time.Now()
		pace := watchEvery
		if e.ag.Idle(in.unit, now, agent.IdlePace) {
			pace = agent.IdlePace
		}
		w.ask(now.Add(pace))
	case vacancyMoved:
		if w := e.units[in.unit]; w != nil {
			w.ask(time.Now())
		}
	case membersAns:
		e.membersAnswer(in)
	case failingAns:
		e.failing, e.haveFail = in.nodes, true
		e.nodesAnswer()
	case previousRead:
		e.previousRead(in)
	case agent.PenaltiesAnswer:
		e.penaltiesAnswer(in)
	case serviceAnswer:
		e.servicesAnswer(in)
	case handedOff, handoffsServed:
		e.handleVolumes(in)
	case watchResumed:
		e.resumed(in)
	case handoverReq:
		e.handover(in)
	case agent.InstanceStarted, agent.InstanceExited, agent.InstanceHealthy, agent.InstanceUnhealthy,
		agent.ControlAnswer, agent.MoveDone, agent.BrakeDone, agent.DrainPublished, agent.SuccessorPassing,
		agent.InstanceFailed, agent.RestartHeld, agent.IntentsPublished:
		e.step(in)
	default:
		e.log.Error("executor: unknown input", "input", in)
	}
}

// nodesAnswer combines the members and the failing into the agent's view
// of the live nodes, once both watches have answered.
func (e *Executor) nodesAnswer() {
	if !e.haveMem || !e.haveFail {
		return
	}
	failing := map[string]bool{}
	for _, n := range e.failing {
		failing[n] = true
	}
	var live []string
	for _, n := range e.members {
		if !failing[n] {
			live = append(live, n)
		}
	}
	e.nodesGen++
	e.step(agent.NodesAnswer{View: &agent.NodesView{Index: e.nodesGen, Nodes: live, Failing: append([]string(nil), e.failing...), Info: e.info}})
}

// step runs one input through the agent and performs its actions.
func (e *Executor) step(in any) {
	if f := e.cfg.Faults.Stepped; f != nil {
		f(in)
	}
	e.claimed(in)
	acts := e.ag.Step(time.Now(), in)
	e.noteClaims(acts)
	if e.log.IsTrace() {
		e.log.Trace("step", "input", traceInput(in), "actions", fmt.Sprintf("%+v", acts))
	}
	// Each decision's record goes in the transaction that carries it out,
	// or alone in its own (agent.Audits; records.go).
	riding, alone := agent.Audits(acts)
	for i, a := range acts {
		e.act(a, riding[i])
	}
	if len(alone) > 0 {
		go e.writeAudits(alone)
	}
}

// act performs a; audit: the records that ride in its transaction.
func (e *Executor) act(a any, audit []agent.Record) {
	switch a := a.(type) {
	case agent.CreateSession:
		if e.stopping {
			// No new session to stop with: answer as a failure, which
			// the agent retries a second later (the loop ends first).
			e.inbox.post(sessionMade{err: errors.New("stopping")})
			return
		}
		go e.createSession()
	case agent.Claim:
		go e.claim(a, audit)
	case agent.Release:
		go e.release(a, audit)
	case agent.Confirm:
		go e.confirm(a, time.Now())
	case agent.Start:
		e.cfg.Instances.Start(a)
	case agent.Stop:
		e.cfg.Instances.Stop(a.Slot, a.Kill)
	case agent.Wake:
		e.timer.Reset(time.Until(a.At))
	case agent.Refresh:
		for _, u := range a.Units {
			if w := e.units[u]; w != nil {
				w.ask(time.Now())
			}
		}
	case agent.Record:
		e.log.Info("fleet: "+a.Action, "slot", a.Slot.String(), "reason", a.Reason)
	case agent.TakeToken:
		go e.takeToken(a)
	case agent.ReturnToken:
		go e.returnToken(a)
	case agent.Update:
		e.cfg.Instances.Update(a)
	case agent.Publish:
		go e.publish(a)
	case agent.MoveDeployment:
		go e.moveDeployment(a)
	case agent.WriteBrake:
		go e.writeBrake(a)
	case agent.PublishDrain:
		go e.publishDrain(a, audit)
	case agent.CheckHeld:
		go e.checkHeld(a)
	case agent.AwaitSuccessor:
		go e.awaitSuccessor(a)
	default:
		if !e.actVolumes(a) && !e.actQueue(a, audit) {
			e.log.Error("executor: unknown action", "action", a)
		}
	}
}

// inbox is the loop's unbounded queue: post never blocks.
type inbox struct {
	mu    sync.Mutex
	q     []any
	ready chan struct{}
}

func (b *inbox) post(in any) {
	b.mu.Lock()
	b.q = append(b.q, in)
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []any {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.q
	b.q = nil
	return q
}

// traceInput shows an input in the trace log.
func traceInput(in any) string {
	switch in := in.(type) {
	case agent.SlotsAnswer:
		return fmt.Sprintf("SlotsAnswer{%s index %d holders %v}", in.View.Unit, in.View.Index, in.View.Holders)
	case agent.NodesAnswer:
		return fmt.Sprintf("NodesAnswer{%d live %v failing %v}", in.View.Index, in.View.Nodes, in.View.Failing)
	}
	return fmt.Sprintf("%T%+v", in, in)
}
