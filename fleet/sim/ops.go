package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// The operator's controls and the fleet's brakes in the simulator
// (fleet/agent/ops.go decides them): with Config.Ops or Config.Storm every
// node watches control/ and the agents run with agent.Config.Control.
//
// Config.Ops adds operator actions drawn from the seed to a run: a pause
// (of the fleet or of one unit, scope placement or all) from just before
// the loss until 8-14 s after it, then a resume; a drain of a node no
// other fault touches, 25 s after the loss. It loses 30 % of the nodes, so
// that the takeover budget (a tenth of the nodes per 10 s) paces the
// takeovers. Config.Storm is another scenario: 60 % of the nodes lost at
// once, no other fault; the storm brake engages, an operator resumes 20 s
// after the loss, and the budget paces what follows.
//
// Invariants, each checked as it happens:
//   - a paused unit gains no new claim: no agent claims a slot of a unit
//     its answer of control/ shows paused, and Consul applies none more
//     than pauseGrace after the pause was written;
//   - a draining node claims nothing (the same two ways), and its status
//     says done only when Consul shows no slot held by it and no instance
//     runs there; a feasible drain is done within drainBound;
//   - the takeover budget is never overspent: the takeovers Consul applied
//     (claims of slots freed by an invalidation, known from the model, not
//     from the agents) come from at most cluster.TakeoverBudget(nodes)
//     lost nodes in any window (two seconds shorter: see claimApplied);
//   - the storm brake is obeyed: no agent claims a takeover of another
//     node's slot while its answer of control/ shows the brake, or after
//     its own write of it;
//   - every decision of the controls comes with its Record in the same
//     step: the brake's write, a takeover, a drain's status, a drain's
//     release of a running instance.

// pauseGrace: a claim decided before a pause reached its node may still be
// applied this long after the pause was written (the watch's pace, a slow
// answer and the claim's own travel).
const pauseGrace = 2 * time.Second

// drainBound is how long a feasible drain of slots slots may take: each
// handoff is a stop or a release, a claim at its rank's time and a new
// answer of the index.
func drainBound(slots int) time.Duration { return 10*time.Second + time.Duration(slots)*5*time.Second }

// OpsResult is what the controls did in a run.
type OpsResult struct {
	Pauses, Resumes, Drains int
	// Takeovers Consul applied; refused for the budget's CAS; held back
	// by the agents (hold records).
	Takeovers, BudgetRefused, HeldBack int
	BrakeEngaged                       bool
	// Resets: failed slots reset (reset.go). Rescheduled: reschedules
	// Consul applied; RescheduleFails: rescheduled slots that failed
	// (their attempts exhausted) and were reset (resched.go).
	Resets, Rescheduled, RescheduleFails int
	// DrainTime: from the drain to its status saying done (0: never).
	DrainTime time.Duration
	// ControlBytes: the answers of the watch on control/.
	ControlBytes, ControlAnswers uint64
}

type nodeOps struct {
	agent    *agent.Agent // the incarnation the rest is about
	ctl      *agent.ControlView
	pending  bool
	brakeIdx uint64 // its own brake write, applied at
	// last: when its watch on control/ last answered (lastOK: it has):
	// asked again no sooner than watchEvery later.
	last   time.Duration
	lastOK bool
	// told: the slots whose restarts its instances hold (reset.go).
	told map[agent.SlotID]string
}

type takeoverDone struct {
	at   time.Duration
	from string
	slot agent.SlotID
}

type simOps struct {
	on         bool
	nodes      map[*node]*nodeOps
	ctlCache   *agent.ControlView
	ctlBytes   uint64
	everHeld   map[agent.SlotID]bool
	lastHolder map[agent.SlotID]string
	takeovers  []takeoverDone
	// pausedSince: by unit ("" the fleet), when the pause was written;
	// drainSince by node.
	pausedSince map[string]time.Duration
	drainSince  map[string]time.Duration
	// pauses: the pauses resumed, for the deployments' bound.
	pauses []pauseSpan
	// fail: the instance failed for good (reset.go).
	fail *simFail
	// lifted: the last resume of the brake; live and backAt: each
	// supervisor's instance as Consul last showed it, and when it last
	// turned live.
	lifted *liftedAt
	live   map[string]bool
	backAt map[string]time.Duration
}

// liftedAt: the last resume that lifted the brake, and the supervisors
// down then (the lifted record's Down).
type liftedAt struct {
	at   time.Duration
	down map[string]bool
}

// supervisors is the mariposa service's instances as Consul shows them,
// live or not (as the CLI reads them for the lifted record).
func (s *Sim) supervisors() []placement.NodeInfo {
	es, _, _ := s.store.HealthService("mariposa", false, true)
	out := make([]placement.NodeInfo, 0, len(es))
	for _, e := range es {
		out = append(out, placement.NodeInfo{Name: e.Instance.Node, Live: e.Status == api.HealthPassing})
	}
	return out
}

// noteLive follows when each supervisor's instance was last seen turn
// live in Consul (after a check changed on node).
func (s *Sim) noteLive(node string) {
	if s.ops == nil {
		return
	}
	for _, n := range s.supervisors() {
		if n.Name != node {
			continue
		}
		was, seen := s.ops.live[node]
		if n.Live && seen && !was {
			s.ops.backAt[node] = s.now
		}
		s.ops.live[node] = n.Live // unseen: live since the start
	}
}

// checkBrakeAfterLift: a brake engaged after a resume names no supervisor
// that was down at the resume and has not been live since: the resume
// dealt with it (a node cut off while the brake was engaged, which sees
// the same nodes vanish only after the resume, must not engage it again:
// no operator is there to resume twice).
func (s *Sim) checkBrakeAfterLift(n *node, r cluster.StormRecord) {
	l := s.ops.lifted
	if l == nil {
		return
	}
	for _, v := range r.Vanished {
		if l.down[v] && s.ops.backAt[v] <= l.at {
			s.violate("storm brake engaged again by %s for %s, down when the brake was lifted at %v and not live since", n.name, v, l.at)
		}
	}
}

// pauseSpan: unit ("" the fleet) was paused from from to to.
type pauseSpan struct {
	unit     string
	from, to time.Duration
}

// pausedWithin is how long unit was paused (itself or the fleet) between
// from and now: a deployment cannot move its slots then (a lost one is
// not claimed again), so its bound is that much longer.
func (s *Sim) pausedWithin(unit string, from time.Duration) time.Duration {
	if s.ops == nil {
		return 0
	}
	spans := slices.Clone(s.ops.pauses)
	for u, t := range s.ops.pausedSince {
		spans = append(spans, pauseSpan{u, t, s.now})
	}
	var d time.Duration
	for _, p := range spans {
		if p.unit != "" && p.unit != unit {
			continue
		}
		if lo, hi := max(p.from, from), p.to; hi > lo {
			d += hi - lo
		}
	}
	return d
}

func (c *Config) opsDefaults() {
	switch {
	case c.Storm:
		c.Chaos = false
		if c.LoseFraction == 0 {
			c.LoseFraction = 0.6
		}
		if c.Settle <= 0 {
			c.Settle = 200 * time.Second
		}
	case c.Ops:
		if c.LoseFraction == 0 {
			c.LoseFraction = 0.3
		}
		if c.Settle <= 0 {
			// The budget moves 30 % of the nodes' slots in about six
			// windows, after the pause.
			c.Settle = 120 * time.Second
		}
	}
}

func (s *Sim) opsInit() {
	s.ops = &simOps{on: s.cfg.Ops || s.cfg.Storm, nodes: map[*node]*nodeOps{}, everHeld: map[agent.SlotID]bool{},
		lastHolder: map[agent.SlotID]string{}, pausedSince: map[string]time.Duration{}, drainSince: map[string]time.Duration{},
		live: map[string]bool{}, backAt: map[string]time.Duration{}}
}

func (s *Sim) nodeOps(n *node) *nodeOps {
	no := s.ops.nodes[n]
	if no == nil || no.agent != n.agent {
		no = &nodeOps{agent: n.agent}
		s.ops.nodes[n] = no
	}
	return no
}

// controlView is the answer of a watch on control/, kept until it moves.
func (s *Sim) controlView() *agent.ControlView {
	idx := s.store.ListIndex(cluster.ControlPrefix)
	if c := s.ops.ctlCache; c != nil && c.Index == idx {
		return c
	}
	es, _, _ := s.store.List(cluster.ControlPrefix, true)
	pairs := make(api.KVPairs, 0, len(es))
	bytes := uint64(2)
	for _, e := range es {
		pairs = append(pairs, e.Pair())
		bytes += uint64(len(e.Key)+len(e.Value)*4/3) + 150 // Consul's JSON, the value in base64
	}
	s.ops.ctlCache = &agent.ControlView{Index: idx, Control: cluster.ParseControl(pairs, nil)}
	s.ops.ctlBytes = bytes
	return s.ops.ctlCache
}

// deliverControl gives n the current answer of its watch on control/ if it
// has not had it.
func (s *Sim) deliverControl(n *node) {
	if !s.ops.on || !n.watched() || n.agent == nil {
		return
	}
	no := s.nodeOps(n)
	v := s.controlView()
	if no.ctl != nil && v.Index <= no.ctl.Index {
		return
	}
	no.ctl = v
	no.last, no.lastOK = s.now, true
	if s.counting {
		s.res.BytesServed += s.ops.ctlBytes
		s.res.Ops.ControlBytes += s.ops.ctlBytes
		s.res.Ops.ControlAnswers++
	}
	s.step(n, agent.ControlAnswer{View: v})
}

// resumeControl: n's watches resumed after a break (a cut, a minority
// side healed): its agent is told that its views may have missed states,
// then gets control/ again.
func (s *Sim) resumeControl(n *node) {
	if !s.ops.on {
		return
	}
	s.step(n, agent.WatchResumed{})
	s.deliverControl(n)
}

// answerControl: control/ moved; every node watching it gets an answer.
func (s *Sim) answerControl() {
	for _, n := range s.nodes {
		if !n.watched() || n.agent == nil {
			continue
		}
		no := s.nodeOps(n)
		if no.pending {
			continue
		}
		no.pending = true
		gen, ag := n.gen, n.agent
		d := s.latency()
		if no.lastOK && s.now+d < no.last+watchEvery {
			d = no.last + watchEvery - s.now
		}
		s.at(d, func() {
			if n.gen != gen || n.agent != ag {
				return
			}
			s.nodeOps(n).pending = false
			s.deliverControl(n)
		})
	}
}

// touchesControl: a commit of key moves the watch on control/ (notify).
func touchesControl(key string) bool { return strings.HasPrefix(key, cluster.ControlPrefix) }

// paused: unit paused for placement in view.
func paused(v *agent.ControlView, unit string) bool {
	if v == nil {
		return false
	}
	_, ok := v.Paused(unit, cluster.PausePlacement)
	return ok
}

// checkDecisions holds an agent's step's actions against what it knew:
// its last answer of control/ and its own brake write (once its answer
// came).
func (s *Sim) checkDecisions(n *node, in any, acts []any) {
	if !s.ops.on {
		return
	}
	no := s.nodeOps(n)
	if b, ok := in.(agent.BrakeDone); ok && b.OK {
		no.brakeIdx = b.Index
	}
	recorded := func(action string, slot agent.SlotID, any bool) bool {
		for _, a := range acts {
			if r, ok := a.(agent.Record); ok && (action == "" || r.Action == action) && (any || r.Slot == slot) {
				return true
			}
		}
		return false
	}
	for _, a := range acts {
		switch a := a.(type) {
		case agent.Claim:
			if paused(no.ctl, a.Slot.Unit) {
				s.violate("paused unit %s: %s claims %s with control/ at %d showing the pause", a.Slot.Unit, n.name, a.Slot, no.ctl.Index)
			}
			if no.ctl != nil {
				if _, d := no.ctl.Drains[n.name]; d {
					s.violate("draining node %s claims %s", n.name, a.Slot)
				}
			}
			if a.Takeover != nil {
				if (no.ctl != nil && no.ctl.Storm != nil) || (no.brakeIdx != 0 && (no.ctl == nil || no.ctl.Index < no.brakeIdx)) {
					s.violate("storm brake engaged: %s takes over %s, lost with %s", n.name, a.Slot, a.Takeover.Entry.From)
				}
				if !takeoverRecorded(acts, a.Slot) {
					s.violate("audit: %s takes over %s without a record", n.name, a.Slot)
				}
			}
		case agent.WriteBrake:
			if !recorded("storm-brake", agent.SlotID{}, true) {
				s.violate("audit: %s writes the storm brake without a record", n.name)
			}
		case agent.PublishDrain:
			if !recorded("drain-status", agent.SlotID{}, true) {
				s.violate("audit: %s publishes its drain's status without a record", n.name)
			}
		case agent.Release:
			s.checkReschedule(n, a, recorded)
			if inst := n.inst[a.Slot]; inst != nil && inst.running && !recorded("", a.Slot, false) {
				s.violate("audit: %s releases %s, whose instance runs, without a record", n.name, a.Slot)
			}
		case agent.Record:
			if a.Action == "hold" {
				s.res.Ops.HeldBack++
			}
		}
	}
	s.checkQueue(n, no, in, acts, recorded)
}

// claimOpsFor is a claim's transaction: with a takeover, the budget's
// compare-and-set of control/takeovers (a set, with the CAS dropped).
func (s *Sim) claimOpsFor(n *node, a agent.Claim) api.KVTxnOps {
	ops := claimOps(a.Slot, n.name, a.Session, "starting")
	if a.Released {
		// The mark must still be there (get fails on a missing key).
		ops = append(ops[:2], append(api.KVTxnOps{{Verb: api.KVGet, Key: a.Slot.ReleasedKey()}}, ops[2:]...)...)
	}
	if a.Fresh {
		// A slot never claimed: its ClaimedKey must not exist (the first op).
		ops = append(api.KVTxnOps{{Verb: api.KVCheckNotExists, Key: a.Slot.ClaimedKey()}}, ops...)
	}
	ops = append(ops, s.delayOps(a)...) // the reschedule delay's (resched.go)
	if a.CheckFailed && !s.cfg.ExecFaults.NoFailedCheck {
		// The slot's failed mark must not exist (agent.Claim.FailedOp).
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: cluster.FailedKey(a.Slot.Unit, a.Slot.K)})
	}
	if t := a.Takeover; t != nil && t.Logged {
		op := &api.KVTxnOp{Verb: api.KVCAS, Key: cluster.TakeoversKey, Index: t.Index, Value: t.Log.Encode()}
		if s.cfg.ExecFaults.NoBudgetCAS {
			op.Verb, op.Index = api.KVSet, 0
		}
		ops = append(ops, op)
	}
	return ops
}

// takeoverTruth, before a claim's transaction: the slot was held and freed
// without a release (an invalidation), and by whom, as the model knows.
func (s *Sim) takeoverTruth(id agent.SlotID) (string, bool) {
	if !s.ops.on || !s.ops.everHeld[id] {
		return "", false
	}
	if e, _, _ := s.store.Get(id.ReleasedKey(), true); e != nil {
		return "", false
	}
	return s.ops.lastHolder[id], true
}

// claimApplied: Consul applied n's claim of id; from: a takeover's.
func (s *Sim) claimApplied(n *node, id agent.SlotID, from string, takeover bool) {
	if !s.ops.on {
		return
	}
	s.ops.everHeld[id] = true
	s.ops.lastHolder[id] = n.name
	s.claimOfFailed(n, id)
	s.claimOfRescheduled(n, id)
	for _, u := range []string{"", id.Unit} {
		if t, ok := s.ops.pausedSince[u]; ok && s.now-t > pauseGrace {
			s.violate("paused unit %s gained a claim: %s by %s, %v after the pause", id.Unit, id, n.name, s.now-t)
		}
	}
	if t, ok := s.ops.drainSince[n.name]; ok && s.now-t > pauseGrace {
		s.violate("draining node %s gained a claim: %s, %v after its drain", n.name, id, s.now-t)
	}
	if !takeover || from == n.name {
		// A node claiming its own lost slot again is no takeover.
		return
	}
	s.res.Ops.Takeovers++
	s.ops.takeovers = append(s.ops.takeovers, takeoverDone{at: s.now, from: from, slot: id})
	// The agents decide with the window ending at their decision, a
	// latency (up to half a second) before this, and a takeover rides on
	// its lost node's logged one up to agent.FreshTakeover older: the
	// window counted here is two seconds shorter.
	window := cluster.TakeoverWindow - 2*time.Second
	from2 := map[string]bool{}
	keep := s.ops.takeovers[:0]
	for _, t := range s.ops.takeovers {
		if s.now-t.at < cluster.TakeoverWindow {
			keep = append(keep, t)
		}
		if s.now-t.at < window {
			from2[t.from] = true
		}
	}
	s.ops.takeovers = keep
	if budget := cluster.TakeoverBudget(len(s.nodes)); len(from2) > budget {
		s.violate("takeover budget overspent: %s taken over by %s; slots of %d lost nodes taken over within %v, budget %d (%s)",
			id, n.name, len(from2), window, budget, strings.Join(sortedKeys(from2), ","))
	}
}

// writeBrake carries out WriteBrake.
func (s *Sim) writeBrake(n *node, a agent.WriteBrake) {
	s.note("%s writes the storm brake: %s", n.name, a.Record.Reason())
	s.rpc(n, func() any {
		ops := api.KVTxnOps{{Verb: api.KVCheckNotExists, Key: cluster.StormKey}}
		if !s.cfg.ExecFaults.NoLiftedCheck {
			ops = append(ops, cluster.StormLiftedCheck(a.Lifted))
		}
		r, err := s.store.KVTxn(s.wall(), append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: cluster.StormKey, Value: a.Record.Encode()}))
		s.countTxn(r, err)
		switch {
		case err != nil:
			return agent.BrakeDone{Err: err}
		case !r.OK:
			return agent.BrakeDone{}
		}
		s.res.Ops.BrakeEngaged = true
		s.note("storm brake engaged by %s", n.name)
		s.checkBrakeAfterLift(n, a.Record)
		return agent.BrakeDone{OK: true, Index: r.Index}
	}, func() any { return agent.BrakeDone{Err: fmt.Errorf("no answer")} })
}

// checkHeld carries out CheckHeld: one consistent read of the keys.
func (s *Sim) checkHeld(n *node, a agent.CheckHeld) {
	s.rpc(n, func() any {
		var ops api.KVTxnOps
		for _, id := range a.Slots {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVGetOrEmpty, Key: id.Key()})
		}
		r, err := s.store.KVTxn(s.wall(), ops)
		if err != nil {
			return agent.HeldChecked{Err: err}
		}
		held := map[agent.SlotID]bool{}
		for i, id := range a.Slots {
			held[id] = r.Results[i].Session == a.Session
		}
		return agent.HeldChecked{Held: held}
	}, func() any { return agent.HeldChecked{Err: fmt.Errorf("no answer")} })
}

// publishDrain carries out PublishDrain; a status that says done is held
// against the model and the node's instances when it is applied.
func (s *Sim) publishDrain(n *node, a agent.PublishDrain) {
	s.rpc(n, func() any {
		b, _ := json.Marshal(a.Status)
		r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{{Verb: api.KVSet, Key: agent.DrainStatusKey(n.name), Value: b}})
		s.countTxn(r, err)
		if err != nil || !r.OK {
			return agent.DrainPublished{Status: a.Status}
		}
		s.note("%s drain status: held %v stuck %v done %v", n.name, a.Status.Held, a.Status.Stuck, a.Status.Done)
		if a.Status.Done {
			s.checkDrained(n)
		}
		return agent.DrainPublished{Status: a.Status, OK: true}
	}, func() any { return agent.DrainPublished{Status: a.Status} })
}

// checkDrained: n's drain says done: Consul shows no slot held by it and
// no instance runs there.
func (s *Sim) checkDrained(n *node) {
	keys, _, _ := s.store.Keys("mariposa/held/", true)
	var held []string
	for _, k := range keys {
		if strings.HasSuffix(k, "/"+n.name) {
			held = append(held, strings.TrimSuffix(strings.TrimPrefix(k, "mariposa/held/"), "/"+n.name))
		}
	}
	var running []string
	for _, id := range sortedSlots(n.inst) {
		if n.inst[id].running {
			running = append(running, id.String())
		}
	}
	if len(held) > 0 || len(running) > 0 {
		s.violate("drain of %s says done while it holds %v and runs %v", n.name, held, running)
	}
	if t, ok := s.ops.drainSince[n.name]; ok && s.res.Ops.DrainTime == 0 && len(held) == 0 {
		s.res.Ops.DrainTime = s.now - t
	}
}

// control writes control keys as the CLI does (mariposa pause, resume,
// drain), with their audit records left out.
func (s *Sim) control(what string, ops api.KVTxnOps) {
	if !s.store.HasLeader() {
		// The CLI retries until a leader answers.
		s.at(100*time.Millisecond, func() { s.control(what, ops) })
		return
	}
	s.note("operator: %s", what)
	r, err := s.store.KVTxn(s.wall(), ops)
	if err != nil || !r.OK {
		panic(fmt.Sprintf("operator %s: %v %v", what, err, r.Errors))
	}
	s.notify()
}

func (s *Sim) pause(unit, scope string) {
	b, _ := json.Marshal(cluster.PauseRecord{Scope: scope, Unit: unit, Reason: "simulated operator", Actor: "sim", At: s.wall()})
	s.control(fmt.Sprintf("pause %q scope %s", unit, scope), api.KVTxnOps{{Verb: api.KVSet, Key: cluster.PauseKey(unit), Value: b}})
	if scope != cluster.PauseDeploy {
		s.ops.pausedSince[unit] = s.now
	}
	s.res.Ops.Pauses++
}

// resume deletes every pause and the storm brake, and writes the lifted
// key (mariposa resume).
func (s *Sim) resume() {
	es, _, _ := s.store.List(cluster.ControlPrefix, true)
	var ops api.KVTxnOps
	for _, e := range es {
		if e.Key == cluster.StormKey || e.Key == cluster.PauseAllKey || strings.HasPrefix(e.Key, cluster.PausePrefix) {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: e.Key})
		}
		if e.Key == cluster.StormKey {
			var r *cluster.StormRecord
			if d, err := cluster.DecodeStormRecord(e.Value); err == nil {
				r = &d
			}
			l := cluster.StormLifted{At: s.wall(), By: "sim", Storm: r, Down: cluster.LiftedDown(r, s.supervisors())}
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: cluster.StormLiftedKey, Value: l.Encode()})
			s.ops.lifted = &liftedAt{at: s.now, down: map[string]bool{}}
			for _, n := range l.Down {
				s.ops.lifted.down[n] = true
			}
		}
	}
	for u, t := range s.ops.pausedSince {
		s.ops.pauses = append(s.ops.pauses, pauseSpan{u, t, s.now})
	}
	clear(s.ops.pausedSince)
	s.res.Ops.Resumes++
	if len(ops) > 0 {
		s.control("resume", ops)
	}
}

func (s *Sim) drain(n *node, within time.Duration) {
	b, _ := json.Marshal(cluster.DrainRecord{Node: n.name, Deadline: s.wall().Add(within), Actor: "sim", At: s.wall()})
	held := len(n.inst)
	s.control(fmt.Sprintf("drain %s (%d slots)", n.name, held), api.KVTxnOps{{Verb: api.KVSet, Key: cluster.DrainPrefix + n.name, Value: b}})
	s.ops.drainSince[n.name] = s.now
	s.res.Ops.Drains++
	bound := drainBound(held)
	s.at(bound, func() {
		if !n.alive || !n.up || n.cut || n.minority {
			return
		}
		e, _, _ := s.store.Get(agent.DrainStatusKey(n.name), true)
		var st agent.DrainStatus
		if e != nil {
			_ = json.Unmarshal(e.Value, &st)
		}
		if !st.Done {
			s.violate("drain of %s (%d slots) not done within %v: status %+v", n.name, held, bound, st)
		}
	})
}

// operatorFaults schedules the operator's actions of an Ops or Storm run;
// spare are the nodes no loss touches (the first four take the chaos
// faults).
func (s *Sim) operatorFaults(spare []int) {
	c := s.cfg
	switch {
	case c.Storm:
		s.at(c.LossAt+20*time.Second, s.resume)
	case c.Ops:
		unit := ""
		if s.rng.IntN(2) == 0 {
			unit = s.units[s.rng.IntN(len(s.units))].Name
		}
		scope := cluster.PausePlacement
		if s.rng.IntN(2) == 0 {
			scope = cluster.PauseAll
		}
		back := 8*time.Second + time.Duration(s.rng.Int64N(int64(6*time.Second)))
		s.at(c.LossAt-time.Second, func() { s.pause(unit, scope) })
		s.at(c.LossAt+back, s.resume)
		if len(spare) > 5 {
			i := 4 + s.rng.IntN(len(spare)-4)
			n := s.nodes[spare[i]]
			s.at(c.LossAt+25*time.Second, func() { s.drain(n, 10*time.Minute) })
			// Another spare node's instance fails for good (reset.go).
			f := s.nodes[spare[4+(i-4+1+s.rng.IntN(len(spare)-5))%(len(spare)-4)]]
			s.at(c.LossAt+failAfter, func() { s.failInstance(f) })
			var rs []*node
			for _, j := range spare[4:] {
				if s.nodes[j] != n {
					rs = append(rs, s.nodes[j])
				}
			}
			s.reschedFaults(rs)
		}
	}
}

// opsWarm notes the placed start's holds (the model's index).
func (s *Sim) opsWarm() {
	keys, _, _ := s.store.Keys("mariposa/held/", true)
	for _, k := range keys {
		rest := strings.TrimPrefix(k, "mariposa/held/")
		parts := strings.Split(rest, "/")
		if len(parts) != 3 {
			continue
		}
		var kk int
		if _, err := fmt.Sscan(parts[1], &kk); err != nil {
			continue
		}
		id := agent.SlotID{Unit: parts[0], K: kk}
		s.ops.everHeld[id] = true
		s.ops.lastHolder[id] = parts[2]
	}
}

// failedOps are the indexes of a transaction's failed ops.
func failedOps(errs api.TxnErrors) []int {
	out := make([]int, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.OpIndex)
	}
	return out
}

// takeoverRecorded: acts carry the claim record of a takeover of slot, in
// website/operations.md's words ("takeover from a lost node"), riding in
// the claim's transaction.
func takeoverRecorded(acts []any, slot agent.SlotID) bool {
	for _, a := range acts {
		if r, ok := a.(agent.Record); ok && r.Slot == slot && r.Action == "claim" && strings.Contains(r.Reason, "takeover from a lost node") {
			w, _ := agent.AuditPlace(acts, r)
			return w == agent.Riding
		}
	}
	return false
}
