package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// Runner is what the fleet needs of the node's supervisor.
type Runner interface {
	ApplySlots(ctx context.Context, slots []supervisor.SlotInstance) (supervisor.ApplyResult, error)
	// Snapshots is every instance's state (a rollout waits for health).
	Snapshots() []supervisor.Snapshot
	// SetPause says which instances' automatic restarts are paused.
	SetPause(supervisor.PauseFunc)
}

// FleetConfig configures a node's part in the fleet.
type FleetConfig struct {
	Client *api.Client
	// Node is this node's Consul node name.
	Node string
	// Lease is the node's lease the slots are held under (its session is
	// bound to serfHealth and mariposa's liveness check).
	Lease  *lease.Lease
	Runner Runner
	Log    hclog.Logger
	// Step is the spacing between claim ranks (default DefaultStep).
	Step time.Duration
	// OnClaim, if set, is told each claim of a slot this node makes: the
	// unit, and how long the slot was vacant as this node saw it.
	OnClaim func(unit string, vacant time.Duration)
	// Now and Rand are the clock and the jitter source (tests).
	Now  func() time.Time
	Rand func() float64
	// Volumes is the node's volume store (volumes.go); APIURL is this
	// node's HTTP API, which serves the snapshots it hands off. A unit
	// with volume blocks runs only where Volumes is set.
	Volumes *volume.Store
	APIURL  string
	// Adopting, when set, names the slots ("<unit>/<k>") whose instances
	// the previous image of this mariposa handed over (an upgrade in
	// place, supervisor.Runner.Adopting): held by the adopted session,
	// they are taken again without a write (adopt.go), never released as
	// strays.
	Adopting func() map[string]bool
}

// Fleet is this node's part in the fleet. It follows the deployed units,
// the live supervisors and the slots with one blocking query each, claims
// the free slots it ranks first for (Assign, ClaimDelay), gives up the slots
// it must (scaled down, removed, rescheduled), and hands the runner the
// instances of the slots it holds. Safety comes from the slot locks, never
// from this ranking: see doc.go.
type Fleet struct {
	cfg  FleetConfig
	log  hclog.Logger
	poke chan struct{}

	mu      sync.Mutex
	local   []UnitSpec // from the node's files
	remote  map[string]*Deployment
	haveDep bool
	slots   map[string]map[int]slotKV // unit -> k -> the key as last read
	haveSl  bool
	nodes   []NodeInfo
	haveNd  bool
	penalty map[string]map[string]time.Time // unit -> node -> until
	held    map[string]*heldSlot            // "<unit>/<k>" -> what this node holds
	vacant  map[string]vacancy              // free slots: since when, with which jitter
	resched map[string]string               // "<unit>/<k>" -> why its instance failed for good
	failed  map[string]string               // "<unit>/<k>" -> why a member of its group failed for good
	// The nodes of the services named by service.<name> attributes.
	svcWatch map[string]context.CancelFunc
	svcNodes map[string]map[string]int
	// The storm brake (storm.go): control/storm as read, and the
	// supervisors seen vanishing.
	storm    *StormRecord
	haveCtl  bool
	vanish   vanishTracker
	vanished []string
	base     int
	// control/takeovers as read: the takeover budget's log.
	takeovers TakeoverLog
	// waiting says, per free slot this node could run, when it claims it
	// or why it does not (Waiting).
	waiting []string
	// Pauses (pause.go): by unit ("" for the whole fleet), the drops of
	// queue entries, what this node holds back (holding, rebuilt by each
	// reconcile) and its queue as last written.
	pauses         map[string]PauseRecord
	drops          map[string]Drop
	holding        []Intent
	intentSince    map[string]time.Time
	intentsWritten []byte
	// Drains (drain.go): by node, as read; the handoffs of this node's
	// drained slots, by slot.
	drains   map[string]DrainRecord
	handoffs map[string]*handoff
	// drainStuck: this draining node's slots no other node can take now,
	// kept here (and running), as last logged.
	drainStuck map[string]bool
	// strays: slots this node's session holds in Consul but this node
	// does not know it holds (a claim applied whose answer was lost), by
	// when first seen; released once seen for strayGrace.
	strays map[string]time.Time
	// judging: deployments this node is moving on (deployment.go).
	judging map[string]bool
}

type slotKV struct {
	value       SlotValue
	session     string
	modifyIndex uint64
	corrupt     error
	// status is what the holder says about its current hold (parseSlots):
	// nil when the slot is not held or nothing is known.
	status *HoldStatus
}

// at says whether s is held at version want, and when it was first healthy
// at it in this hold (nil: not yet).
func (s slotKV) at(want string) (bool, *time.Time) {
	if s.status == nil || s.status.Version != want {
		return false, nil
	}
	return true, s.status.HealthyAt
}

type heldSlot struct {
	unit  UnitSpec
	k     int
	term  *lease.Term
	value SlotValue // as claimed
	// status is what this holder last wrote into the slot's status key
	// (zero: nothing yet in this hold).
	status HoldStatus
	// orphan: the term of a non-exclusive slot ended (the node's session
	// was lost) and its instance keeps running, until another node holds
	// the slot or this one claims it again.
	orphan bool
	// updating: a rollout (rollout.go) is replacing or about to replace
	// the instance; failedSeen: versions whose rollout failed.
	updating   bool
	failedSeen map[string]bool
	// publishing: waiting to say in the slot's status key that the
	// instance is healthy at its version (a deployment's progress, and
	// the healthy counts), once in each hold.
	publishing bool
	pubMu      sync.Mutex // one publishHealthy at a time
	// prevNode held the slot before this node claimed it.
	prevNode string
	// Volumes (volumes.go): the instance starts only once they are
	// ready; preparing while they are restored.
	volumesReady, preparing bool
	volumesHanded           bool   // handed to the runner since ready
	volumeNote              string // how they were made ready, for the supervisor check
}

type vacancy struct {
	since  time.Time
	jitter float64
}

// NewFleet returns a node's fleet member; Run starts it.
func NewFleet(cfg FleetConfig) *Fleet {
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.Step <= 0 {
		cfg.Step = DefaultStep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Fleet{cfg: cfg, log: cfg.Log.Named("fleet"), poke: make(chan struct{}, 1),
		remote: map[string]*Deployment{}, slots: map[string]map[int]slotKV{}, penalty: map[string]map[string]time.Time{},
		held: map[string]*heldSlot{}, vacant: map[string]vacancy{}, resched: map[string]string{}, failed: map[string]string{},
		svcWatch: map[string]context.CancelFunc{}, svcNodes: map[string]map[string]int{}, handoffs: map[string]*handoff{}}
}

func (f *Fleet) wake() {
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// SetLocal makes cfg's cluster units (services with a count in the node's
// own files) units of the fleet, beside the deployed ones.
func (f *Fleet) SetLocal(cfg *schema.Config) {
	f.mu.Lock()
	f.local = unitsOf(cfg.Services, cfg.Groups)
	f.mu.Unlock()
	f.wake()
}

// Event takes the supervisor's events: an instance in a slot that failed
// for good, with restart.on_exhausted = "reschedule", gives its slot up
// for another node; a member of a group that failed for good otherwise
// fails the group: every member stops and the slot is failed (the group
// moves and fails as one), until mariposa reset.
func (f *Fleet) Event(e supervisor.Event) {
	if e.Kind == supervisor.EventPaused || e.Kind == supervisor.EventResumed {
		f.wake() // the node's queue changed
		return
	}
	if e.Slot == "" || e.Kind != supervisor.EventFailed {
		return
	}
	f.mu.Lock()
	h, ok := f.held[e.Slot]
	switch {
	case ok && h.unit.rescheduleOnExhausted():
		f.resched[e.Slot] = e.Service + ": " + e.Reason
	case ok && len(h.unit.Services) > 1:
		f.failed[e.Slot] = "member " + e.Service + " failed: " + e.Reason
	default:
		ok = false
	}
	f.mu.Unlock()
	if ok {
		f.wake()
	}
}

func (u UnitSpec) rescheduleOnExhausted() bool {
	for _, s := range u.Services {
		if s.Restart.OnExhausted == "reschedule" {
			return true
		}
	}
	return false
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// units is every unit by name: deployed ones, then the node's own (a name
// deployed and also in the node's files is the deployed one).
func (f *Fleet) unitsLocked() map[string]UnitSpec {
	return MergeUnits(f.remote, f.local, func(unit, deployment string) {
		f.log.Error("a unit is deployed twice; keeping the first", "unit", unit, "deployment", deployment)
	})
}

// Run takes part in the fleet until ctx ends. It returns with the slots
// still held; Release gives them up once their instances have stopped.
func (f *Fleet) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, w := range []func(context.Context){f.watchDeploy, f.watchSlots, f.watchNodes, f.watchPenalties, f.watchControl} {
		wg.Add(1)
		go func() { defer wg.Done(); w(ctx) }()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := f.reconcile(ctx)
		if next <= 0 || next > time.Minute {
			next = time.Minute
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return nil
		case <-f.poke:
		case <-timer.C:
		}
	}
}

// Release gives up every slot this node holds, with a record of each:
// called once their instances have stopped (mariposa stopping), so the
// next holders start at once, without a lock delay. It returns once the
// next holders have the data handed off with them (awaitRestores), or
// ctx ends.
func (f *Fleet) Release(ctx context.Context, reason string) {
	f.mu.Lock()
	held := f.held
	f.held = map[string]*heldSlot{}
	f.mu.Unlock()
	var serving []*heldSlot
	for id, h := range held {
		if f.release(h, SlotReleased, reason, nil) {
			serving = append(serving, h)
		}
		f.log.Info("released slot", "slot", id, "reason", reason)
	}
	// A planned move: the snapshots handed off are served until the next
	// holders have them (bounded; volumes.go).
	f.awaitRestores(ctx, serving)
}

// release gives h up with a final value and its record; history, if set,
// is the slot's new reschedule tracker. It says whether the release
// published a handoff of this node's own snapshots.
func (f *Fleet) release(h *heldSlot, state, reason string, ops api.TxnOps) bool {
	now := f.cfg.Now()
	v := SlotValue{Node: f.cfg.Node, State: state, Since: now, Reason: reason, Reschedules: h.value.Reschedules}
	if state != SlotHeld && len(ops) > 0 {
		v.Reschedules = append(slices.Clone(v.Reschedules), RescheduleEvent{Node: f.cfg.Node, At: now, Reason: reason})
		if len(v.Reschedules) > maxReschedules {
			v.Reschedules = v.Reschedules[len(v.Reschedules)-maxReschedules:]
		}
	}
	action := "release"
	switch {
	case state == SlotFailed:
		action = "fail"
	case len(ops) > 0:
		action = "reschedule"
	}
	// The instance has stopped: its volumes' snapshots go with the release,
	// in the same transaction, fenced by the slot's session.
	hops, note, serves, err := f.handoffOps(context.Background(), h)
	switch {
	case err != nil:
		f.log.Warn("no handoff of the slot's data: the next holder applies on_missing", "slot", slotName(h.unit.Unit.Name, h.k), "error", err)
		reason += "; no handoff of its data: " + err.Error()
	case note != "":
		ops = append(hops, ops...)
		reason += "; " + note
	}
	ops = append(ops, AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Service: h.unit.Unit.Name, Slot: slotName(h.unit.Unit.Name, h.k),
		Action: action, From: f.cfg.Node, To: state, Reason: reason, TermIndex: h.term.Index}),
		// The hold's status goes with the hold.
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: StatusKey(h.unit.Unit.Name, h.k)}})
	if err := h.term.ReleaseWith(v.encode(), ops); err != nil {
		f.log.Warn("could not release a slot; retrying in the background", "slot", slotName(h.unit.Unit.Name, h.k), "error", err)
		return false
	}
	return serves
}

func slotName(unit string, k int) string { return fmt.Sprintf("%s/%d", unit, k) }

// reconcile gives up what must go, claims what is due, and hands the
// runner the instances of the held slots. It returns when to look again.
func (f *Fleet) reconcile(ctx context.Context) time.Duration {
	adopted := f.adoptSlots(ctx)
	now := f.cfg.Now()
	f.mu.Lock()
	units := f.unitsLocked()
	type giveUp struct {
		h      *heldSlot
		state  string
		reason string
		ops    api.TxnOps
	}
	var gone []giveUp
	var reclaim []claimPlan
	f.holding = f.holding[:0]
	type restampOf struct {
		h *heldSlot
		u UnitSpec
	}
	var restamp []restampOf
	changed := adopted
	for id, h := range f.held {
		u, ok := units[h.unit.Unit.Name]
		lost := false
		select {
		case <-h.term.Lost():
			lost = true
		default:
		}
		switch {
		case lost && f.handoffs[id] != nil:
			// Drained: the instance runs until its successor passes.
			if f.handoffs[id].passed || cutOff(h, now, f.cfg.Lease.TTL()) {
				delete(f.held, id)
				f.log.Info("drain: stopping the old instance", "slot", id)
				break
			}
			continue
		case lost && ok && h.k < count(u) && !h.unit.exclusive():
			// A non-exclusive instance keeps running without its lock
			// (SPEC section 3) until another node holds the slot.
			if !h.orphan {
				h.orphan = true
				f.log.Warn("lost slot; its instance keeps running until another node holds the slot", "slot", id, "error", h.term.Err())
				go func() { _ = h.term.Release() }()
			}
			if s := f.slots[u.Unit.Name][h.k]; s.session != "" && s.value.Node != f.cfg.Node {
				delete(f.held, id)
				f.log.Warn("slot held by another node now; stopping this node's instance", "slot", id, "holder", s.value.Node)
				break
			}
			if cutOff(h, now, f.cfg.Lease.TTL()) {
				delete(f.held, id)
				f.log.Warn("cut off from Consul: stopping the instance (stop_after)", "slot", id)
				break
			}
			reclaim = append(reclaim, claimPlan{u: u, k: h.k, rank: -1})
			continue
		case lost:
			delete(f.held, id)
			gone = append(gone, giveUp{h: h})
			f.log.Warn("lost slot", "slot", id, "error", h.term.Err())
		case !ok:
			delete(f.held, id)
			gone = append(gone, giveUp{h: h, state: SlotReleased, reason: "unit removed"})
		case h.k >= count(u):
			delete(f.held, id)
			gone = append(gone, giveUp{h: h, state: SlotReleased, reason: fmt.Sprintf("count is %d", count(u))})
		case !lost && cutOff(h, now, f.cfg.Lease.TTL()):
			// stop_after: a non-exclusive holder cut off from Consul stops
			// its child; the release follows once Consul answers.
			delete(f.held, id)
			gone = append(gone, giveUp{h: h, state: SlotReleased,
				reason: fmt.Sprintf("cut off from Consul for longer than stop_after (%s)", h.unit.Unit.Placement.StopAfter)})
			f.log.Warn("cut off from Consul: stopping the instance (stop_after)", "slot", id)
		case (f.failed[id] != "" || f.resched[id] != "") && f.holdPlacement(u.Unit.Name, id, f.failed[id]+f.resched[id]):
			// Paused: the failed instance stays as it is until the resume.
			continue
		case f.failed[id] != "":
			reason := f.failed[id]
			delete(f.held, id)
			delete(f.failed, id)
			gone = append(gone, giveUp{h: h, state: SlotFailed, reason: reason})
		case f.resched[id] != "":
			reason := f.resched[id]
			delete(f.held, id)
			delete(f.resched, id)
			p := u.Unit.Placement.Reschedule
			hist := append(slices.Clone(h.value.Reschedules), RescheduleEvent{Node: f.cfg.Node, At: now, Reason: reason})
			_, exhausted := NextDelay(p, hist, now)
			state := SlotReleased
			if exhausted {
				state = SlotFailed
			}
			pen, _ := json.Marshal(map[string]any{"until": now.Add(p.Penalty), "reason": reason})
			ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVSet, Key: PenaltyKey(u.Unit.Name, f.cfg.Node), Value: pen}}}
			gone = append(gone, giveUp{h: h, state: state, reason: "rescheduled: " + reason, ops: ops})
		default:
			if vols, _ := volumesOf(u); len(vols) > 0 {
				switch {
				case !h.volumesReady && !h.preparing:
					h.preparing = true
					go f.prepare(ctx, id, h)
				case h.volumesReady && !h.volumesHanded:
					h.volumesHanded = true // ready since the last look: start it
					changed = true
					go f.copyLoop(ctx, id, h) // periodic copies, when replicas > 0
				}
			}
			switch {
			case reflect.DeepEqual(h.unit, u):
			case rolling(h.unit, u):
				// A new definition with an update block: replaced under a
				// rollout token, a few at a time (rollout.go), unless a
				// canary phase or a failed deployment holds it back.
				if attempt := f.attemptKeyLocked(u); !h.updating && !h.failedSeen[attempt] && !f.heldBackLocked(u, h.k) && !f.holdUpdate(u, id) {
					h.updating = true
					go f.update(ctx, id, h, u, attempt)
				}
			case sameRun(h.unit, u):
				h.unit = u // placement only
				changed = true
			default:
				// max_parallel = 0: at once, once the slot says so.
				restamp = append(restamp, restampOf{h, u})
			}
			// Every hold says when it is healthy at its version, not only
			// a deployment's: a re-claimed slot (a restart, a drain's
			// undo, a node's return) counts as healthy again once it is.
			if !h.updating && !h.publishing && !h.orphan && needsPublish(h) {
				name := f.deploymentOfLocked(u.Unit.Name)
				h.publishing = true
				go f.publish(ctx, id, h, name != "" && f.remote[name].running())
			}
			continue
		}
		changed = true
	}
	orphans, stops := f.drainStepLocked(now)
	var drained []*heldSlot
	for _, id := range orphans {
		h := f.held[id]
		ho := &handoff{since: now}
		f.handoffs[id] = ho
		drained = append(drained, h)
		go f.awaitSuccessor(ctx, h.unit, h.k, ho)
	}
	pastDeadline := !now.Before(f.drains[f.cfg.Node].Deadline)
	for _, id := range stops {
		h := f.held[id]
		delete(f.held, id)
		if !pastDeadline {
			// An exclusive slot: stopped, then released; the next handoff
			// waits for the new holder's instance to pass.
			ho := &handoff{since: now}
			f.handoffs[id] = ho
			go f.awaitSuccessor(ctx, h.unit, h.k, ho)
		}
		gone = append(gone, giveUp{h: h, state: SlotReleased, reason: "drained from " + f.cfg.Node})
		changed = true
	}
	if _, draining := f.drains[f.cfg.Node]; !draining {
		clear(f.handoffs)
	} else {
		for id, ho := range f.handoffs {
			if _, held := f.held[id]; ho.passed && !held {
				delete(f.handoffs, id)
			}
		}
	}
	f.mu.Unlock()

	for _, h := range drained {
		// Released with its instance still running: the next holder
		// starts its own, and this one stops once that one passes.
		f.release(h, SlotReleased, "drained from "+f.cfg.Node, nil)
		f.log.Info("drain: released the slot; its instance runs until the next one passes", "slot", slotName(h.unit.Unit.Name, h.k))
	}

	retry := false
	for _, r := range restamp {
		if err := f.restamp(ctx, r.h, runHash(r.u)); err != nil {
			retry = true
			f.log.Warn("the slot's version could not be updated; its instance stays as it is for now",
				"slot", slotName(r.u.Unit.Name, r.h.k), "error", err)
			continue
		}
		f.mu.Lock()
		r.h.unit = r.u
		f.mu.Unlock()
		changed = true
	}
	if changed {
		f.applyHeld(ctx)
	}
	for _, g := range gone {
		if g.state == "" {
			_ = g.h.term.Release() // lost: nothing of ours to write
			continue
		}
		f.release(g.h, g.state, g.reason, g.ops)
		f.log.Info("released slot", "slot", slotName(g.h.unit.Unit.Name, g.h.k), "state", g.state, "reason", g.reason)
	}

	f.followServices(ctx, units)
	f.brake(now)
	f.releaseStrays(ctx, now)
	defer f.publishIntentsIfPaused(ctx, now)
	judgeNext := f.judge(ctx, now)
	f.mu.Lock()
	if d, ok := f.drains[f.cfg.Node]; ok {
		if in := d.Deadline.Sub(now); in > 0 && (judgeNext == 0 || in < judgeNext) {
			judgeNext = in // give up what is left at the deadline
		}
	}
	f.mu.Unlock()
	next, claims := f.plan(units, now)
	if judgeNext > 0 && (next <= 0 || judgeNext < next) {
		next = judgeNext
	}
	claims = append(reclaim, claims...)
	claimed := false
	for _, c := range claims {
		if ctx.Err() != nil {
			break
		}
		if f.claim(ctx, c) {
			claimed = true
		}
	}
	if claimed {
		f.applyHeld(ctx)
		next = 0 // look again at once: more may be due
	}
	// Look again when a held slot's stop_after could run out.
	f.mu.Lock()
	for _, h := range f.held {
		if p := h.unit.Unit.Placement; p != nil && !p.Exclusive && p.StopAfter > 0 {
			due := h.term.LastRenewed().Add(f.cfg.Lease.TTL()/2 + p.StopAfter).Sub(now)
			if due < 100*time.Millisecond {
				due = 100 * time.Millisecond
			}
			if next <= 0 || due < next {
				next = due
			}
		}
	}
	f.mu.Unlock()
	if claimed {
		return time.Millisecond
	}
	f.mu.Lock()
	paused := len(f.pauses) > 0
	f.mu.Unlock()
	// While paused, look again every second: the queue follows the
	// supervisor's snapshots, which an event can run ahead of.
	if (len(claims) > 0 || retry || paused) && (next <= 0 || next > time.Second) {
		// A due claim failed (no session yet, lock delay, Consul away):
		// try again soon, not at the next change.
		next = time.Second
	}
	return next
}

// brake engages the storm brake when this node sees a storm and the brake
// is not engaged yet: one txn that creates control/storm only if it does
// not exist, with its record. Every node that sees the storm tries; one
// writes.
func (f *Fleet) brake(now time.Time) {
	f.mu.Lock()
	if !f.haveCtl || !f.haveNd || f.storm != nil {
		f.mu.Unlock()
		return
	}
	vanished, base := f.vanish.observe(f.nodes, now) // ages the window
	f.vanished, f.base = vanished, base
	f.mu.Unlock()
	if !Storm(len(vanished), base) {
		return
	}
	rec := StormRecord{At: now, Node: f.cfg.Node, Vanished: vanished, Base: base}
	ok, _, _, err := f.cfg.Client.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: StormKey}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: StormKey, Value: rec.encode()}},
		AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Action: "storm-brake",
			Reason: rec.Reason() + "; takeovers of lost slots paused until mariposa resume"}),
	}, nil)
	switch {
	case err != nil:
		f.log.Warn("storm: could not engage the brake; trying again", "error", err)
	case ok:
		f.mu.Lock()
		if f.storm == nil {
			f.storm = &rec
		}
		f.mu.Unlock()
		f.log.Error("storm brake engaged: takeovers of lost slots are paused until mariposa resume",
			"vanished", strings.Join(vanished, ","), "of", base)
	}
}

type claimPlan struct {
	u    UnitSpec
	k    int
	rank int
	// budget is the fleet's takeover budget, should the claim be one.
	budget int
}

// cutOff: h's unit has a stop_after, and the node's session has not been
// renewed for that long past the renewal that was due (renewals come every
// TTL/2): the node is cut off from Consul.
func cutOff(h *heldSlot, now time.Time, ttl time.Duration) bool {
	p := h.unit.Unit.Placement
	if p == nil || p.Exclusive || p.StopAfter <= 0 {
		return false
	}
	return now.Sub(h.term.LastRenewed()) > ttl/2+p.StopAfter
}

// maxStop is the longest a member's stop may take (drain, then the stop
// signal's timeout before SIGKILL).
func (u UnitSpec) maxStop() time.Duration {
	var d time.Duration
	for _, s := range u.Services {
		d = max(d, s.Stop.Drain+s.Stop.Timeout)
	}
	return d
}

func (u UnitSpec) exclusive() bool { return u.Unit.Placement != nil && u.Unit.Placement.Exclusive }

func count(u UnitSpec) int {
	if u.Unit.Placement == nil {
		return 0
	}
	return u.Unit.Placement.Count
}

// plan lists the claims due now and how long until the next one is.
func (f *Fleet) plan(units map[string]UnitSpec, now time.Time) (time.Duration, []claimPlan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.haveDep || !f.haveSl || !f.haveNd {
		return time.Second, nil
	}
	var next time.Duration
	var due []claimPlan
	f.waiting = f.waiting[:0]
	nodes := markDraining(withServices(f.nodes, f.svcNodes), f.drains)
	stillVacant := map[string]bool{}
	names := make([]string, 0, len(units))
	for n := range units {
		names = append(names, n)
	}
	live := 0
	for _, n := range f.nodes {
		if n.Live {
			live++
		}
	}
	budget := TakeoverBudget(max(f.base, live))
	tlog := f.takeovers // with the takeovers planned below
	sort.Strings(names)
	for _, name := range names {
		u := units[name]
		p := u.Unit.Placement
		holders := map[int]string{}
		var free []int
		notBefore := map[int]time.Time{}
		takeover := map[int]bool{}
		for k := 0; k < count(u); k++ {
			id := slotName(name, k)
			if _, mine := f.held[id]; mine {
				holders[k] = f.cfg.Node
				continue
			}
			s, ok := f.slots[name][k]
			if ok && s.corrupt != nil {
				continue // reported by the watcher; never claimed blindly
			}
			if ok && s.session != "" {
				if f.cfg.Lease != nil && s.session == f.cfg.Lease.Session() {
					f.noteStrayLocked(id, now) // ours in Consul, not here: a claim whose answer was lost
				}
				holders[k] = s.value.Node
				continue
			}
			if ok && s.value.State == SlotFailed {
				continue
			}
			vac, seen := f.vacant[id]
			if !seen {
				vac = vacancy{since: now, jitter: f.cfg.Rand()}
				f.vacant[id] = vac
			}
			stillVacant[id] = true
			nb := vac.since
			if ok && len(s.value.Reschedules) > 0 {
				d, _ := NextDelay(p.Reschedule, s.value.Reschedules, now)
				if t := s.value.Reschedules[len(s.value.Reschedules)-1].At.Add(d); t.After(nb) {
					nb = t
				}
			}
			if ok && isTakeover(s.value, f.cfg.Node) {
				takeover[k] = true
				// Lost with its node (invalidated, not released): give the
				// node time to come back (node_lost_after), and a cut-off
				// holder time to stop its child (stop_after).
				wait := p.Reschedule.NodeLostAfter
				if p.StopAfter > 0 {
					// A cut-off holder decides to stop at most TTL/2 (a
					// renewal period) plus stop_after after the cut, and
					// its stop takes up to drain + timeout; a second more
					// for scheduling.
					wait = max(wait, p.StopAfter+f.cfg.Lease.TTL()/2+u.maxStop()+time.Second)
				}
				if t := vac.since.Add(wait); t.After(nb) {
					nb = t
				}
			}
			notBefore[k] = nb
			free = append(free, k)
		}
		if len(free) == 0 {
			continue
		}
		v := viewOf(name, nodes, f.slots, units, f.penalty[name])
		for k, n := range holders { // with this node's holds its slot keys do not show yet
			v.Holders[k] = n
		}
		asg := Assign(u.Unit, free, v, now)
		// Each slot's ranking assumes the slots before it go to their
		// first choice; this node may be due for several as a later
		// choice, and claims no more in one pass than max_per_node allows.
		room := placement(u.Unit).MaxPerNode - len(heldBy(holders, f.cfg.Node, -1))
		for _, k := range free {
			r, ok := asg.Of(k, f.cfg.Node)
			if !ok || !r.Verdict.OK {
				continue
			}
			id := slotName(name, k)
			vac := f.vacant[id]
			d, first := ClaimDelay(r.Rank, f.cfg.Step, vac.jitter)
			if !first {
				d, _ = SecondRoundDelay(r.HRWRank, f.cfg.Step, vac.jitter)
			}
			at := vac.since.Add(d)
			if notBefore[k].After(vac.since) {
				at = notBefore[k].Add(d)
			}
			what := id + " free"
			if takeover[k] {
				what = id + " lost with " + f.slots[name][k].value.Node
			}
			ranked := fmt.Sprintf("rank %d of %d", r.Rank+1, feasibleCount(asg[k]))
			why := ""
			if !now.Before(at) && takeover[k] {
				if f.storm != nil {
					f.waiting = append(f.waiting, fmt.Sprintf("slot %s; %s, takeovers paused by the storm brake (mariposa resume)", what, ranked))
					continue // the brake: resume wakes us
				}
				from := f.slots[name][k].value.Node
				if ok, oldest := tlog.allows(from, now, budget); !ok {
					at = oldest.Add(TakeoverWindow + d) // ranks still apart
					why = ", the takeover budget is spent"
				} else {
					tlog = tlog.with(Takeover{Slot: id, Node: f.cfg.Node, From: from, At: now})
				}
			}
			if !now.Before(at) {
				if pr, paused := f.pausedLocked(name, PausePlacement); paused {
					f.waiting = append(f.waiting, fmt.Sprintf("slot %s; %s, claims paused (%s)", what, ranked, pr.Why()))
					f.holding = append(f.holding, Intent{Kind: "claim", Target: id, Detail: ranked})
					continue // resume wakes us
				}
				if room <= 0 {
					f.waiting = append(f.waiting, fmt.Sprintf("slot %s; %s, max_per_node reached with the claims due now", what, ranked))
					continue // the next pass sees the claims made
				}
				room--
				due = append(due, claimPlan{u: u, k: k, rank: r.Rank, budget: budget})
				continue
			}
			if notBefore[k].After(vac.since) && why == "" {
				why = ", after the reschedule delay or node_lost_after"
			}
			f.waiting = append(f.waiting, fmt.Sprintf("slot %s; %s%s, claiming in %s", what, ranked, why, at.Sub(now).Round(time.Millisecond)))
			if w := at.Sub(now); next == 0 || w < next {
				next = w
			}
		}
	}
	for id := range f.vacant {
		if !stillVacant[id] {
			delete(f.vacant, id)
		}
	}
	return next, due
}

var errSlotFailed = errors.New("the slot has failed: reset it with mariposa reset")

// claim tries to take slot k of u; true if it did.
func (f *Fleet) claim(ctx context.Context, c claimPlan) bool {
	u, k, rank := c.u, c.k, c.rank
	name := u.Unit.Name
	id := slotName(name, k)
	lockDelay := f.cfg.Lease.LockDelay()
	cctx, cancel := context.WithTimeout(ctx, lockDelay+2*time.Second)
	defer cancel()
	if vols, _ := volumesOf(u); len(vols) > 0 && f.cfg.Volumes == nil {
		f.log.Debug("not claiming a slot with volumes: this node has no volume store", "slot", id)
		return false
	}
	var claimed SlotValue
	var prevNode string
	exclusive := u.Unit.Placement != nil && u.Unit.Placement.Exclusive
	t, err := f.cfg.Lease.TryAcquire(cctx, lease.Hold{
		Key:         SlotKey(name, k),
		Unconfirmed: !exclusive,
		Log:         f.log.With("slot", id),
		Claim: func(cur *api.KVPair) ([]byte, api.TxnOps, error) {
			var prev SlotValue
			if cur != nil {
				v, err := DecodeSlotValue(cur.Value)
				if err != nil {
					return nil, nil, fmt.Errorf("slot %s: %w", id, err)
				}
				prev = v
			}
			if prev.State == SlotFailed {
				return nil, nil, errSlotFailed
			}
			now := f.cfg.Now()
			claimed = SlotValue{Node: f.cfg.Node, State: SlotHeld, Since: now, Reschedules: prev.Reschedules, Version: runHash(u),
				Takeover: cur != nil && cur.Session == "" && isTakeover(prev, f.cfg.Node)}
			from := ""
			if cur != nil {
				from = prev.Node
			}
			prevNode = from
			reason := fmt.Sprintf("rank %d", rank)
			var ops api.TxnOps
			if claimed.Takeover {
				reason += "; takeover from a lost node"
				op, err := budgetOp(f.cfg.Client, Takeover{Slot: id, Node: f.cfg.Node, From: prev.Node, At: now}, max(c.budget, 1))
				if err != nil {
					return nil, nil, err
				}
				ops = append(ops, op)
			}
			ops = append(ops, AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Service: name, Slot: id,
				Action: "claim", From: from, To: f.cfg.Node, Reason: reason}))
			return claimed.encode(), ops, nil
		},
	})
	if err != nil {
		switch {
		case errors.Is(err, lease.ErrKeyHeld):
			f.log.Debug("slot taken by another node", "slot", id)
		case errors.Is(err, errSlotFailed):
		case errors.Is(err, errBudget):
			f.log.Debug("takeover deferred: the fleet's takeover budget is spent", "slot", id)
		case ctx.Err() != nil:
		default:
			f.log.Debug("claim failed; trying again", "slot", id, "error", err)
		}
		return false
	}
	f.mu.Lock()
	f.held[id] = &heldSlot{unit: u, k: k, term: t, value: claimed, prevNode: prevNode}
	vac, wasVacant := f.vacant[id]
	delete(f.vacant, id)
	f.mu.Unlock()
	if f.cfg.OnClaim != nil && wasVacant {
		f.cfg.OnClaim(name, f.cfg.Now().Sub(vac.since))
	}
	f.log.Info("claimed slot", "slot", id, "rank", rank, "term_index", t.Index)
	go func() {
		select {
		case <-t.Lost():
			f.wake()
		case <-ctx.Done():
		}
	}()
	return true
}

// applyHeld hands the runner the instances of every held slot.
func (f *Fleet) applyHeld(ctx context.Context) {
	f.mu.Lock()
	ids := make([]string, 0, len(f.held))
	for id := range f.held {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []supervisor.SlotInstance
	for _, id := range ids {
		h := f.held[id]
		sl := supervisor.Slot{SlotInfo: supervisor.SlotInfo{Unit: h.unit.Unit.Name, Index: h.k, Key: h.term.Key,
			Session: h.term.Session, Term: h.term.Index}}
		if vols, _ := volumesOf(h.unit); len(vols) > 0 {
			if !h.volumesReady {
				continue // started once its volumes are (prepareVolumes)
			}
			sl.VolumeDir = filepath.Dir(f.cfg.Volumes.Dir(h.unit.Unit.Name, h.k, vols[0].Path))
			sl.Volumes = h.volumeNote
		}
		if h.unit.Unit.Placement != nil && h.unit.Unit.Placement.Exclusive {
			sl.Lost, sl.Expired, sl.Err, sl.Deadline = h.term.Lost(), h.term.Expired(), h.term.Err, h.term.StrictDeadline
		}
		for _, svc := range h.unit.Services {
			out = append(out, supervisor.SlotInstance{Service: svc, Slot: sl})
		}
	}
	f.mu.Unlock()
	if _, err := f.cfg.Runner.ApplySlots(ctx, out); err != nil && ctx.Err() == nil {
		f.log.Warn("could not hand the slots to the supervisor", "error", err)
	}
}

// Waiting says, one line per free slot this node could run, when it
// claims it or why it does not, as of the last look: "slot api/2 free;
// rank 2 of 14, claiming in 400ms". Empty when it waits for none. It goes
// into the node's liveness check output.
func (f *Fleet) Waiting() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	const most = 10
	lines := slices.Clone(f.waiting)
	if len(lines) > most {
		lines = append(lines[:most], fmt.Sprintf("and %d more", len(f.waiting)-most))
	}
	return strings.Join(lines, "\n")
}

func feasibleCount(rs []Ranked) int {
	n := 0
	for _, r := range rs {
		if r.Verdict.OK {
			n++
		}
	}
	return n
}

// Held lists the slots this node holds ("<unit>/<k>"), sorted.
func (f *Fleet) Held() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.held))
	for id := range f.held {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// strayGrace is how long a slot must look held by this node's session,
// unknown to it, before it is released: longer than the watcher takes to
// catch up with a claim or a release this node made.
const strayGrace = 3 * time.Second

// noteStrayLocked notes slot id as held by this node's session in Consul;
// it is a stray unless this node knows it holds it.
func (f *Fleet) noteStrayLocked(id string, now time.Time) {
	if f.strays == nil {
		f.strays = map[string]time.Time{}
	}
	if _, known := f.held[id]; known {
		delete(f.strays, id)
		return
	}
	if _, seen := f.strays[id]; !seen {
		f.strays[id] = now
	}
}

// releaseStrays releases the slots this node's session holds without this
// node knowing it (a claim transaction Consul applied, whose answer never
// came back): no instance runs in them, and nobody else could claim them
// until the session ended. The unlock fails unless this session still
// holds the key, so a stale view releases nothing of anyone else's.
func (f *Fleet) releaseStrays(ctx context.Context, now time.Time) {
	if f.cfg.Lease == nil {
		return
	}
	var adopting map[string]bool
	if f.cfg.Adopting != nil {
		adopting = f.cfg.Adopting()
	}
	f.mu.Lock()
	mine := f.cfg.Lease.Session()
	var due []string
	for id, since := range f.strays {
		if adopting[id] {
			continue // taken again once the watchers have it (adoptSlots)
		}
		unit, k, _ := ParseSlot(id)
		s, ok := f.slots[unit][k]
		_, known := f.held[id]
		switch {
		case known || !ok || s.session == "" || s.session != mine:
			delete(f.strays, id)
		case now.Sub(since) >= strayGrace:
			due = append(due, id)
			delete(f.strays, id)
		}
	}
	f.mu.Unlock()
	for _, id := range due {
		unit, k, _ := ParseSlot(id)
		v := SlotValue{Node: f.cfg.Node, State: SlotReleased, Since: now, Reason: "held by this node without its knowing (a claim whose answer was lost)"}
		ok, _, _, err := f.cfg.Client.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVUnlock, Key: SlotKey(unit, k), Value: v.encode(), Session: mine}},
			AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Service: unit, Slot: id, Action: "release", From: f.cfg.Node,
				To: SlotReleased, Reason: v.Reason}),
		}, (&api.QueryOptions{}).WithContext(ctx))
		if err == nil && ok {
			f.log.Warn("released a slot this node's session held without its knowing (a claim whose answer was lost)", "slot", id)
		}
	}
}
