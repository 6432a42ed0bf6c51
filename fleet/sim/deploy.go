package sim

// Deployments in the simulator (Config.Deploys): an operator deploys from
// the seed, the agents roll the versions out (fleet/agent/deploy.go), and
// the invariants of CLUSTER.md section 12 for deployments are checked as
// events happen:
//
//   - every deployment reaches a terminal state within deployBound, and
//     at the end every one older than half of it; a record never goes back to an
//     older deployment, nor moves once terminal, nor is replaced while it
//     runs without saying how it ended;
//   - auto_revert leaves no instance on the failed version (when the
//     revert succeeds, and at the end);
//   - never more than max_parallel instances of a unit down for an update
//     at once (from the Update sent until the slot is published healthy,
//     while the session whose token covers it still holds the slot: an
//     instance that breaks before min_healthy_time stays down until it
//     is said healthy again; an orphan claimed back under a new session
//     counts again once it holds a token again, markDown);
//   - a healthy status says a time by which the instance had been said
//     healthy for min_healthy_time without a break (health.go: a break
//     within min_healthy_time starts the time over), and not a later one
//     than its publish;
//   - a deployment with a progress_deadline fails on it only once it went
//     progress_deadline + agent.ProgressSkew without progress, and no
//     later than progressSlack after its last progress's deadline beyond
//     its judge's absence (progress.go);
//   - the fencing token does not move across an update (the Update names
//     the hold's token; the fenced writes go on with it);
//   - every decision written (a record, a holder's status) has its audit
//     record in the same transaction.
//
// The operator's deploys, each on its own unit: a rolling update; a
// canary phase of 2 promoted by hand 4-8 s later; a bad version (its
// instances never pass their checks) with auto_revert; a rolling
// update followed, the moment its last instance is healthy, by another
// deploy 0-20 ms later (a pipeline deploying again at once: the judge's
// success and the operator's deploy race for the record, which the CAS
// settles); and a stalled version (never healthy, no healthy_deadline,
// progress_deadline 5 s, auto_revert: stallBlock). Instances said healthy
// break now and then, for a while or for good (health.go).

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/consulmodel"
)

// DeployStats counts the deployments' outcomes and decisions.
type DeployStats struct {
	// Outcomes by final status (successful, failed, cancelled; running:
	// never terminal).
	Outcomes map[string]int
	// Reverts: auto_reverts the judges wrote; Promotes: canary phases
	// ended; Updates: instances updated in place; Longest: the longest
	// time from a deployment's start to its end.
	Reverts, Promotes, Updates int
	Longest                    time.Duration
	// Statuses: the holders' statuses written (each a transaction of
	// its own); Idle: those that say a slot healthy while its unit's
	// deployment does not run (a slot claimed again: every hold says
	// it).
	Statuses, Idle int
	// Takes, TakesRefused: the rollout tokens asked for, and those
	// refused (a Raft entry each that changes nothing: the herd the
	// holders' turns avoid, fleet/agent/tokens.go); Returns,
	// ReturnsRefused the same for their returns.
	Takes, TakesRefused, Returns, ReturnsRefused int
	// Breaks: instances said healthy that broke (health.go); BreaksDown:
	// those down for an update then (their min_healthy_time counts
	// again). ProgressFailed: deployments failed by progress_deadline.
	Breaks, BreaksDown, ProgressFailed int
}

// deployBound: a deployment of a unit of count slots is terminal within
// this long of its start: 20 s (a lost node's detection, a slot 0 to
// claim again) plus 4 s per batch of max_parallel (an update's start,
// min_healthy_time, and as much again for a revert): 40 s for 10 slots.
// Unchanged by the health breaks: one within min_healthy_time delays its
// batch by less than earlyBreakBy + earlyBreakFor (2.4 s), once per
// instance, and the longest deployment in seeds 1-400 took 24.0 s.
func deployBound(count int) time.Duration {
	batches := (count + updateBlock.MaxParallel - 1) / updateBlock.MaxParallel
	return 20*time.Second + time.Duration(batches)*4*time.Second
}

// healthyAfter: a good version's instance passes its checks this long
// after it starts; a bad one ("-bad") never does.
const healthyAfter = 300 * time.Millisecond

var updateBlock = agent.UpdateBlock{MaxParallel: 2, AutoRevert: true, MinHealthyTime: time.Second, HealthyDeadline: 3 * time.Second}

// stallBlock: the stalled deploy's update block: no healthy_deadline, so
// that only its progress_deadline fails it.
var stallBlock = agent.UpdateBlock{MaxParallel: 2, AutoRevert: true, MinHealthyTime: time.Second, ProgressDeadline: 5 * time.Second}

// neverHealthy: a bad version's instances ("-bad") never pass their
// checks, nor a stalled one's ("-stall": no healthy_deadline, failed by
// progress_deadline).
func neverHealthy(v string) bool {
	return strings.HasSuffix(v, "-bad") || strings.HasSuffix(v, "-stall")
}

// downBy: the node that took a slot down for an update, and the session
// whose rollout token covers it (the Update's; after the node claimed
// the slot back under a new session, that session's once it took a
// token again).
type downBy struct {
	n    *node
	sess string
}

type nodeUnit struct {
	n    *node
	unit string
}

type deployWatch struct {
	last    uint64
	pending bool
	lastAns time.Duration
}

type depTrack struct {
	lastN      uint64
	lastStatus string
	// lastPromoted: only to trace promotions.
	lastPromoted bool
	status       map[uint64]string
	started      map[uint64]time.Duration
	terminal     map[uint64]bool
	flagged      map[uint64]bool
	// short: per deployment, how long its unit ran short of its count
	// since it started (a lost node's slots waiting for the takeover
	// budget, a drain): it cannot be judged then, so its bound is that
	// much longer.
	short map[uint64]time.Duration
	// failed: versions a deployment of the unit failed at with auto_revert
	// asked; no instance may stay on them.
	failed map[string]bool
	// Per deployment with a progress_deadline (pd): its version, its last
	// progress (its start, or the latest HealthyAt at its version a
	// holder's status said), and how long its judge was absent (no live
	// holder of slot 0 that reaches a leader, sampled every judgeSample).
	pd        map[uint64]time.Duration
	pdVersion map[uint64]string
	progress  map[uint64]time.Duration
	judgeless map[uint64]time.Duration
	// points: its start and every HealthyAt at its version (no sooner
	// than its start), as written.
	points map[uint64][]progressPoint
}

type simDeploy struct {
	watch map[nodeUnit]*deployWatch
	cache map[string]*agent.DeployView
	track map[string]*depTrack
	// down: slots whose instance is down for an update, by holder.
	down     map[agent.SlotID]downBy
	auditSeq uint64
	// race: the unit whose next deploy follows its last healthy instance.
	race      string
	raceFired bool
	// hrng: the source of the health breaks and of the stalled deploy's
	// time (health.go), apart from the scheduler's; breaks: how many so
	// far.
	hrng   *rand.Rand
	breaks int
	// sampling: the judges' absence is being sampled (progressTick).
	sampling bool
}

func (s *Sim) deploySetup() {
	if !s.cfg.Deploys {
		return
	}
	s.dep = &simDeploy{watch: map[nodeUnit]*deployWatch{}, cache: map[string]*agent.DeployView{}, track: map[string]*depTrack{},
		down: map[agent.SlotID]downBy{}, hrng: rand.New(rand.NewPCG(s.cfg.Seed, 0x627265616b))}
	for _, u := range s.units {
		d := agent.Deployment{N: 1, Version: "v1", From: "v1", Stable: "v1", Status: cluster.DeploySuccessful, Update: updateBlock, Started: s.wall()}
		b, _ := json.Marshal(d)
		_, err := s.store.Put(s.wall(), agent.RecordKey(u.Name), b, 0)
		must(err)
		s.dep.track[u.Name] = &depTrack{lastN: 1, lastStatus: d.Status, started: map[uint64]time.Duration{1: 0}, status: map[uint64]string{},
			terminal: map[uint64]bool{1: true}, flagged: map[uint64]bool{}, failed: map[string]bool{}, short: map[uint64]time.Duration{},
			pd: map[uint64]time.Duration{}, pdVersion: map[uint64]string{}, progress: map[uint64]time.Duration{}, judgeless: map[uint64]time.Duration{},
			points: map[uint64][]progressPoint{}}
	}
	for _, n := range s.nodes {
		for _, id := range sortedSlots(n.inst) {
			inst := n.inst[id]
			inst.version = "v1"
			// A placed fleet's holders have said their slots healthy.
			at := s.wall()
			b, _ := json.Marshal(agent.Status{HoldStatus: cluster.HoldStatus{Index: inst.index, Version: "v1", HealthyAt: &at}})
			r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{{Verb: api.KVLock, Key: id.StatusKey(), Session: inst.session, Value: b}})
			must(err)
			if !r.OK {
				panic(fmt.Sprintf("warm status of %s: %v", id, r.Errors))
			}
		}
	}
	s.at(time.Second, s.deployTick)
}

// deployStart: a node's agent (re)starts: its deploy watches answer at
// once, and the instances it runs (a placed start) are healthy.
func (s *Sim) deployStart(n *node, warm bool) {
	if s.dep == nil {
		return
	}
	for id, dn := range s.dep.down {
		if dn.n == n {
			delete(s.dep.down, id)
		}
	}
	for _, u := range s.units {
		delete(s.dep.watch, nodeUnit{n, u.Name})
		s.deliverDeploy(n, u.Name)
	}
	if warm {
		for _, id := range sortedSlots(n.inst) {
			s.reportHealthy(n, id, n.inst[id], n.inst[id].version, placedOdds)
		}
	}
}

// afterStart: a good version's instance passes its checks healthyAfter
// later (and may break then: health.go).
func (s *Sim) afterStart(n *node, id agent.SlotID, version string) {
	if s.dep == nil || neverHealthy(version) {
		return
	}
	gen, inst := n.gen, n.inst[id]
	s.at(healthyAfter, func() {
		if n.gen == gen && inst != nil && n.inst[id] == inst && inst.running {
			s.reportHealthy(n, id, inst, version, startedOdds)
		}
	})
}

func (s *Sim) deployView(unit string) *agent.DeployView {
	if v, ok := s.dep.cache[unit]; ok {
		return v
	}
	es, idx, _ := s.store.List(agent.DeployPrefix(unit), true)
	kvs := make([]agent.KV, len(es))
	for i, e := range es {
		kvs[i] = agent.KV{Key: e.Key, Value: e.Value, Session: e.Session, ModifyIndex: e.ModifyIndex}
	}
	v := agent.ParseDeployView(unit, idx, kvs)
	s.dep.cache[unit] = v
	return v
}

func (s *Sim) deployWatchOf(n *node, unit string) *deployWatch {
	k := nodeUnit{n, unit}
	w := s.dep.watch[k]
	if w == nil {
		w = &deployWatch{lastAns: -time.Hour}
		s.dep.watch[k] = w
	}
	return w
}

func (s *Sim) deliverDeploy(n *node, unit string) {
	w := s.deployWatchOf(n, unit)
	w.pending = false
	if !n.watched() {
		return
	}
	v := s.deployView(unit)
	if v.Index <= w.last {
		return
	}
	w.last, w.lastAns = v.Index, s.now
	s.step(n, agent.DeployAnswer{View: v})
}

// scheduleDeploy: n's watch on unit's deployment answers a change, paced
// as the other watches.
func (s *Sim) scheduleDeploy(n *node, unit string) {
	w := s.deployWatchOf(n, unit)
	if w.pending || !n.watched() {
		return
	}
	w.pending = true
	d := s.latency()
	// A node idle in the unit (agent.Idle: it holds none of its slots
	// and claims none soon) hears its deployment at the idle pace: it
	// needs the record only to start a slot it claims at its target,
	// and a stale one costs an update, not a wrong decision.
	pace := watchEvery
	if n.agent != nil && n.agent.Idle(unit, s.wall(), idlePace) {
		pace = idlePace
	}
	if s.now+d < w.lastAns+pace {
		d = w.lastAns + pace - s.now
	}
	gen := n.gen
	s.at(d, func() {
		if n.gen == gen {
			s.deliverDeploy(n, unit)
		}
	})
}

// deployCommits checks the commits' deployment writes and sends the
// watches their answers.
func (s *Sim) deployCommits(commits []consulmodel.Commit) {
	if s.dep == nil {
		return
	}
	changed, records := map[string]bool{}, map[string]bool{}
	for _, c := range commits {
		audited := false
		for _, k := range c.Keys {
			if strings.HasPrefix(k, cluster.AuditPrefix) {
				audited = true
			}
		}
		for _, k := range c.Keys {
			rest, ok := strings.CutPrefix(k, cluster.UnitsPrefix)
			if !ok {
				continue
			}
			unit, tail, _ := strings.Cut(rest, "/")
			changed[unit] = true
			records[unit] = records[unit] || tail == "record"
			if tail != "record" && !strings.HasPrefix(tail, "status/") {
				continue
			}
			if tail != "record" {
				s.statusProgress(unit, k, c.Index)
			}
			if e, _, _ := s.store.Get(k, true); e != nil && e.ModifyIndex == c.Index && !audited {
				s.violate("%s written without its audit record in the same transaction", k)
			}
		}
	}
	for _, u := range sortedKeys(changed) {
		delete(s.dep.cache, u)
		if records[u] {
			s.checkRecord(u)
		}
		for _, n := range s.nodes {
			s.scheduleDeploy(n, u)
		}
	}
	if u := s.dep.race; u != "" && !s.dep.raceFired && changed[u] {
		v := s.deployView(u)
		if d := v.Record; d != nil && d.Status == cluster.DeployRunning && d.Version == "v2" {
			ok := true
			for k := range s.unitCount(u) {
				if st, has := v.Status[k]; !has || st.Version != d.Version || st.HealthyAt == nil {
					ok = false
				}
			}
			if ok {
				s.dep.raceFired = true
				s.at(time.Duration(s.rng.Int64N(int64(20*time.Millisecond))), func() { s.deploy(u, "v3", 0, updateBlock) })
			}
		}
	}
}

func (s *Sim) unitCount(unit string) int {
	for _, u := range s.units {
		if u.Name == unit {
			return u.Count
		}
	}
	return 0
}

// checkRecord follows the unit's record from one write to the next.
func (s *Sim) checkRecord(unit string) {
	t := s.dep.track[unit]
	e, _, _ := s.store.Get(agent.RecordKey(unit), true)
	var d agent.Deployment
	if t == nil || e == nil || json.Unmarshal(e.Value, &d) != nil {
		return
	}
	switch {
	case d.N < t.lastN:
		s.violate("deployment record of %s went back from %d to %d (%s)", unit, t.lastN, d.N, d.Status)
	case d.N == t.lastN && agent.Terminal(t.lastStatus) && d.Status != t.lastStatus:
		s.violate("deployment %s/%d moved from %s to %s", unit, d.N, t.lastStatus, d.Status)
	case d.N > t.lastN:
		if !t.terminal[t.lastN] && (d.Ended == nil || d.Ended.N != t.lastN) {
			s.violate("deployment %s/%d replaced by %d while %s, without its outcome", unit, t.lastN, d.N, t.lastStatus)
		}
		if _, ok := t.started[d.N]; !ok {
			t.started[d.N] = s.now
		}
		if pd := d.Update.ProgressDeadline; pd > 0 && d.Status == cluster.DeployRunning {
			t.pd[d.N], t.pdVersion[d.N], t.progress[d.N] = pd, d.Version, d.Started.Sub(epoch)
			t.points[d.N] = []progressPoint{{at: t.progress[d.N], seen: -time.Hour}}
			if !s.dep.sampling {
				s.dep.sampling = true
				s.at(judgeSample, s.progressTick)
			}
		}
	}
	if d.Promoted && !t.lastPromoted && d.N == t.lastN && d.Canaries > 0 {
		s.res.Deploys.Promotes++
	}
	if d.N > t.lastN && d.RevertOf > 0 {
		s.res.Deploys.Reverts++
	}
	if e := d.Ended; e != nil {
		s.progressEnded(unit, t, e.N, e.Status, e.Reason)
		s.ended(t, e.N, e.Status)
		if e.Status == cluster.DeployFailed {
			t.failed[e.Version] = true
		}
	}
	if agent.Terminal(d.Status) {
		s.progressEnded(unit, t, d.N, d.Status, d.Reason)
		s.ended(t, d.N, d.Status)
		if d.Status == cluster.DeployFailed && d.Update.AutoRevert && d.Stable != "" && d.Stable != d.Version && !s.deploysPaused(unit) {
			// Failed with auto_revert asked and a stable version to go
			// back to, yet not reverted (not while deploys are paused:
			// no auto_revert then, as promised).
			t.failed[d.Version] = true
		}
		if d.Status == cluster.DeploySuccessful && d.RevertOf > 0 {
			s.checkReverted(unit, false)
		}
	}
	if d.N != t.lastN || d.Status != t.lastStatus || d.Promoted != t.lastPromoted {
		s.note("deployment %s/%d %s %s promoted=%v", unit, d.N, d.Version, d.Status, d.Promoted)
	}
	if d.N >= t.lastN {
		t.lastN, t.lastStatus, t.lastPromoted = d.N, d.Status, d.Promoted
	}
}

func (s *Sim) ended(t *depTrack, n uint64, status string) {
	if t.terminal[n] {
		return
	}
	t.terminal[n], t.status[n] = true, status
	if n > 1 {
		s.res.Deploys.Longest = max(s.res.Deploys.Longest, s.now-t.started[n])
	}
}

// checkReverted: no instance of unit runs a version a deployment failed
// at with auto_revert.
func (s *Sim) checkReverted(unit string, end bool) {
	t := s.dep.track[unit]
	for _, n := range s.nodes {
		// A node cut off from the servers, or whose server is on the
		// minority side, hears of no revert: its orphan of a
		// non-exclusive slot runs on until it is healed and sees the
		// slot's new holder (checked at the end).
		if !n.alive || !n.up || (!n.watched() && !end) {
			continue
		}
		for _, id := range sortedSlots(n.inst) {
			if inst := n.inst[id]; id.Unit == unit && inst.running && t.failed[inst.version] {
				when := "once its revert succeeded"
				if end {
					when = "at the end"
				}
				s.violate("auto_revert left slot %s on %s on the failed version %s %s", id, n.name, inst.version, when)
			}
		}
	}
}

// markDown: n takes slot id down for an update under session sess;
// never more than max_parallel of a unit at once, counting the slots
// whose token's session still holds them. An orphan claimed back under a
// new session while down for an update (its token gone with the old
// session) counts again once it holds a token again (downAgain): in
// between it is down without one, as agent's retake says, while another
// holder may have taken the token its old session lost (seed 114 of
// TestSimulation's config: the stalled deploy's judge on the minority
// side of a partition, its token given to another slot meanwhile).
func (s *Sim) markDown(n *node, id agent.SlotID, sess string) {
	s.dep.down[id] = downBy{n, sess}
	s.checkDown(id.Unit)
}

// downAgain: n holds a rollout token for slot id under sess again.
func (s *Sim) downAgain(n *node, id agent.SlotID, sess string) {
	if dn, ok := s.dep.down[id]; ok && dn.n == n && dn.sess != sess {
		s.dep.down[id] = downBy{n, sess}
		s.checkDown(id.Unit)
	}
}

func (s *Sim) checkDown(unit string) {
	count := 0
	for did, dn := range s.dep.down {
		if did.Unit != unit || !dn.n.alive || !dn.n.up {
			continue
		}
		if e, _, _ := s.store.Get(did.Key(), true); e != nil && e.Session == dn.sess {
			count++
		}
	}
	if max := updateBlock.MaxParallel; count > max {
		s.violate("unit %s: %d instances down for an update at once, max_parallel %d", unit, count, max)
	}
}

func (s *Sim) deployStopped(n *node, id agent.SlotID) {
	if s.dep != nil && s.dep.down[id].n == n {
		delete(s.dep.down, id)
	}
}

// releaseOpsWith: a release also deletes the slot's status key.
func (s *Sim) releaseOpsWith(ops api.KVTxnOps, id agent.SlotID) api.KVTxnOps {
	if s.dep == nil {
		return ops
	}
	return append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: id.StatusKey()})
}

func (s *Sim) auditOp(node string, r agent.Record) *api.KVTxnOp {
	s.dep.auditSeq++
	b, _ := json.Marshal(map[string]any{"node": node, "slot": r.Slot.String(), "action": r.Action, "reason": r.Reason})
	return &api.KVTxnOp{Verb: api.KVSet, Key: fmt.Sprintf("%s%s-%d", cluster.AuditPrefix, node, s.dep.auditSeq), Value: b}
}

// actDeploy carries out a deployment action; false: not one.
func (s *Sim) actDeploy(n *node, a any) bool {
	gen := n.gen
	switch a := a.(type) {
	case agent.TakeToken:
		s.rpc(n, func() any {
			r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{
				{Verb: api.KVCheckSession, Key: a.Slot.Key(), Session: a.Session},
				{Verb: api.KVLock, Key: agent.TokenKey(a.Slot.Unit, a.T), Session: a.Session, Value: []byte(strconv.Itoa(a.Slot.K))}})
			s.note("%s token %d for %s: %v", n.name, a.T, a.Slot, err == nil && r.OK)
			s.res.Deploys.Takes++
			if err == nil && !r.OK {
				s.res.Deploys.TakesRefused++
			}
			if err != nil || !r.OK {
				return agent.TokenDone{Slot: a.Slot, T: a.T}
			}
			s.downAgain(n, a.Slot, a.Session)
			return agent.TokenDone{Slot: a.Slot, T: a.T, OK: true, Index: r.Results[1].ModifyIndex}
		}, func() any { return agent.TokenDone{Slot: a.Slot, T: a.T} })
	case agent.ReturnToken:
		s.rpc(n, func() any {
			r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{
				{Verb: api.KVCheckSession, Key: agent.TokenKey(a.Slot.Unit, a.T), Session: a.Session},
				{Verb: api.KVDeleteCAS, Key: agent.TokenKey(a.Slot.Unit, a.T), Index: a.Index}})
			s.note("%s token %d of %s back: %v", n.name, a.T, a.Slot, err == nil && r.OK)
			s.res.Deploys.Returns++
			if err == nil && !r.OK {
				s.res.Deploys.ReturnsRefused++
			}
			return agent.ReturnDone{Slot: a.Slot, T: a.T, OK: err == nil && r.OK, Index: a.Index}
		}, func() any { return agent.ReturnDone{Slot: a.Slot, T: a.T} })
	case agent.Update:
		s.note("%s update %s %s -> %s index %d", n.name, a.Slot, a.From, a.To, a.Index)
		if old := n.inst[a.Slot]; old != nil && old.index != a.Index && !old.reclaimed {
			s.violate("slot %s on %s: the fencing token moved across an update (%d -> %d)", a.Slot, n.name, old.index, a.Index)
		}
		s.markDown(n, a.Slot, a.Session)
		s.res.Deploys.Updates++
		if inst := n.inst[a.Slot]; inst != nil {
			inst.running = false
			delete(n.inst, a.Slot)
			s.running[a.Slot] = deleteInst(s.running[a.Slot], inst)
		}
		n.startSeq++
		tok := n.startSeq
		n.starting[a.Slot] = tok
		s.at(50*time.Millisecond, func() {
			if n.gen != gen || !n.alive || n.starting[a.Slot] != tok {
				return
			}
			delete(n.starting, a.Slot)
			s.startInstance(n, agent.Start{Slot: a.Slot, Index: a.Index, Session: a.Session, Version: a.To})
			s.afterStart(n, a.Slot, a.To)
			s.step(n, agent.InstanceStarted{Slot: a.Slot})
		})
	case agent.Publish:
		s.note("%s publish %s %s healthy=%v failed=%q", n.name, a.Slot, a.Status.Version, a.Status.HealthyAt != nil, a.Status.Failed)
		s.checkStreak(n, a)
		if a.Status.HealthyAt != nil {
			s.deployStopped(n, a.Slot)
		}
		b, _ := json.Marshal(a.Status)
		ops := api.KVTxnOps{
			{Verb: api.KVCheckSession, Key: a.Slot.Key(), Session: a.Session},
			{Verb: api.KVCheckIndex, Key: a.Slot.Key(), Index: a.Index},
			{Verb: api.KVLock, Key: a.Slot.StatusKey(), Session: a.Session, Value: b},
		}
		if s.cfg.ExecFaults.PublishInHeldKey {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: a.Slot.Key(), Value: slotValue(n.name, a.Slot, "healthy")})
		}
		if !s.cfg.ExecFaults.NoAudit {
			ops = append(ops, s.auditOp(n.name, a.Audit))
		}
		s.rpc(n, func() any {
			r, err := s.store.KVTxn(s.wall(), ops)
			if err == nil && r.OK && s.counting {
				s.res.Deploys.Statuses++
				if v := s.deployView(a.Slot.Unit); a.Status.HealthyAt != nil && (v.Record == nil || v.Record.Status != cluster.DeployRunning) {
					s.res.Deploys.Idle++
				}
			}
			return agent.PublishDone{Slot: a.Slot, Kind: a.Kind, Version: a.Status.Version, Index: a.Index, OK: err == nil && r.OK}
		}, func() any {
			return agent.PublishDone{Slot: a.Slot, Kind: a.Kind, Version: a.Status.Version, Index: a.Index}
		})
	case agent.MoveDeployment:
		s.note("%s move %s %d -> %d %s", n.name, a.Unit, a.CAS, a.Next.N, a.Audit.Action)
		b, _ := json.Marshal(a.Next)
		var ops api.KVTxnOps
		if !s.cfg.ExecFaults.NoDeployCAS {
			ops = append(ops, &api.KVTxnOp{Verb: api.KVCheckIndex, Key: agent.RecordKey(a.Unit), Index: a.CAS})
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: agent.RecordKey(a.Unit), Value: b})
		if !s.cfg.ExecFaults.NoAudit {
			ops = append(ops, s.auditOp(n.name, a.Audit))
			if a.Also.Action != "" {
				ops = append(ops, s.auditOp(n.name, a.Also))
			}
		}
		drop := s.cfg.ExecFaults.DropProgressFail && (strings.Contains(a.Next.Reason, "progress_deadline") ||
			(a.Next.Ended != nil && strings.Contains(a.Next.Ended.Reason, "progress_deadline")))
		s.rpc(n, func() any {
			if drop {
				return agent.MoveDone{Unit: a.Unit}
			}
			r, err := s.store.KVTxn(s.wall(), ops)
			return agent.MoveDone{Unit: a.Unit, OK: err == nil && r.OK}
		}, func() any { return agent.MoveDone{Unit: a.Unit} })
	default:
		return false
	}
	return true
}

func deleteInst(list []*instance, inst *instance) []*instance {
	out := list[:0]
	for _, i := range list {
		if i != inst {
			out = append(out, i)
		}
	}
	return out
}

// operator schedules the seed's deploys.
func (s *Sim) operator() {
	if s.dep == nil || len(s.units) < 4 {
		return
	}
	order := s.rng.Perm(len(s.units))
	at := func() time.Duration { return time.Second + time.Duration(s.rng.Int64N(int64(11*time.Second))) }
	rolling, canary, bad, race := s.units[order[0]].Name, s.units[order[1]].Name, s.units[order[2]].Name, s.units[order[3]].Name
	s.at(at(), func() { s.deploy(rolling, "v2", 0, updateBlock) })
	t, promote := at(), time.Duration(4+s.rng.IntN(5))*time.Second
	s.at(t, func() {
		s.deploy(canary, "v2", 2, updateBlock)
		s.at(promote, func() { s.promote(canary, 2) })
	})
	s.at(at(), func() { s.deploy(bad, "v2-bad", 0, updateBlock) })
	s.dep.race = race
	s.at(at(), func() { s.deploy(race, "v2", 0, updateBlock) })
	if len(s.units) < 5 {
		return
	}
	// Drawn from the breaks' source: the scheduler's draws stay as they
	// were.
	stall := s.units[order[4]].Name
	s.at(time.Second+time.Duration(s.dep.hrng.Int64N(int64(11*time.Second))), func() { s.deploy(stall, "v2-stall", 0, stallBlock) })
}

// deploy is the operator's deploy: the next record, CAS on the current
// one, with its audit record; a running deployment is cancelled by it.
func (s *Sim) deploy(unit, version string, canaries int, up agent.UpdateBlock) {
	e, _, _ := s.store.Get(agent.RecordKey(unit), true)
	var cur agent.Deployment
	if e == nil || json.Unmarshal(e.Value, &cur) != nil {
		return
	}
	next := agent.Deployment{N: cur.N + 1, Version: version, Stable: cur.Stable, Status: cluster.DeployRunning, Canaries: canaries,
		Promoted: canaries == 0, Update: up, Started: s.wall(), From: cur.Stable}
	if cur.Status == cluster.DeploySuccessful {
		next.From = cur.Version
	}
	if cur.Status == cluster.DeployRunning {
		next.Ended = &agent.Outcome{N: cur.N, Version: cur.Version, Status: cluster.DeployCancelled,
			Reason: fmt.Sprintf("superseded by deployment %d", next.N)}
	}
	s.operatorWrite(unit, e.ModifyIndex, next, "deploy", func() { s.deploy(unit, version, canaries, up) })
}

// promote ends deployment n's canary phase (CAS on the record).
func (s *Sim) promote(unit string, n uint64) {
	e, _, _ := s.store.Get(agent.RecordKey(unit), true)
	var cur agent.Deployment
	if e == nil || json.Unmarshal(e.Value, &cur) != nil || cur.N != n || cur.Status != cluster.DeployRunning || cur.Promoted {
		s.note("operator promote %s/%d: nothing to promote", unit, n)
		return
	}
	cur.Promoted = true
	s.operatorWrite(unit, e.ModifyIndex, cur, "promote", func() { s.promote(unit, n) })
}

func (s *Sim) operatorWrite(unit string, cas uint64, next agent.Deployment, what string, again func()) {
	b, _ := json.Marshal(next)
	r, err := s.store.KVTxn(s.wall(), api.KVTxnOps{
		{Verb: api.KVCheckIndex, Key: agent.RecordKey(unit), Index: cas},
		{Verb: api.KVSet, Key: agent.RecordKey(unit), Value: b},
		s.auditOp("operator", agent.Record{Slot: agent.SlotID{Unit: unit, K: -1}, Action: what, Reason: next.Version}),
	})
	s.note("operator %s %s/%d %s: ok=%v", what, unit, next.N, next.Version, err == nil && r.OK)
	if err != nil || !r.OK {
		s.at(200*time.Millisecond, again)
		return
	}
	s.notify()
}

// runningSlots: how many slots of unit have an instance running on a live
// node.
func (s *Sim) runningSlots(unit string) int {
	seen := map[int]bool{}
	for _, n := range s.nodes {
		if !n.alive || !n.up {
			continue
		}
		for id, in := range n.inst {
			if id.Unit == unit && in.running {
				seen[id.K] = true
			}
		}
	}
	return len(seen)
}

// deployTick: every second, the bound on each deployment, and the
// watches of nodes that missed an answer (cut off, a minority) catch up.
func (s *Sim) deployTick() {
	for _, u := range s.units {
		t := s.dep.track[u.Name]
		short := s.runningSlots(u.Name) < u.Count
		for _, n := range sortedN(t.started) {
			if short && !t.terminal[n] {
				t.short[n] += time.Second
			}
			if bound := deployBound(u.Count) + s.pausedWithin(u.Name, t.started[n]) + t.short[n]; !t.terminal[n] && !t.flagged[n] && s.now-t.started[n] > bound {
				t.flagged[n] = true
				s.violate("deployment %s/%d not terminal %v after it started", u.Name, n, bound)
			}
		}
		idx := s.deployView(u.Name).Index
		for _, n := range s.nodes {
			if w := s.dep.watch[nodeUnit{n, u.Name}]; n.watched() && (w == nil || (w.last < idx && !w.pending)) {
				s.scheduleDeploy(n, u.Name)
			}
		}
	}
	s.at(time.Second, s.deployTick)
}

func (s *Sim) deployFinal() {
	if s.dep == nil {
		return
	}
	s.res.Deploys.Outcomes = map[string]int{}
	for _, u := range s.units {
		t := s.dep.track[u.Name]
		for _, n := range sortedN(t.started) {
			if !t.terminal[n] && !t.flagged[n] && s.now-t.started[n] > deployBound(u.Count)/2+s.pausedWithin(u.Name, t.started[n])+t.short[n] {
				s.violate("deployment %s/%d not terminal at the end (started at %.1fs)", u.Name, n, t.started[n].Seconds())
			}
			if n > 1 {
				st := t.status[n]
				if st == "" {
					st = cluster.DeployRunning
				}
				s.res.Deploys.Outcomes[st]++
			}
		}
		s.checkReverted(u.Name, true)
	}
}

func sortedN(m map[uint64]time.Duration) []uint64 {
	out := make([]uint64, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
