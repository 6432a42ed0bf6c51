package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// A deployment's state (CLUSTER.md section 5, items 1, 5 and 6). Every
// spec n that a deploy makes desired gets deploy/<name>/state/<n>, written
// in the deploy's own transaction:
//
//	            deploy            all slots healthy at the spec
//	(none) ─────────────▶ running ─────────────────────────────▶ successful
//	                        │  │                                 (stable = n)
//	                        │  └──────────▶ cancelled  (a newer deploy, -force)
//	                        ▼
//	                      failed ──▶ auto_revert: spec n+1 = stable's, running,
//	                                 no canary phase, same update block
//
// The holders publish their progress in their slots' status keys
// (HoldStatus: Version, the run hash of what they run, and HealthyAt;
// never in the lock key, whose ModifyIndex is the fencing token), so that
// any node can judge the deployment from the slots it already watches (the
// status keys are under slots/ too): deployStep is that
// judgement, a pure function of the deployment, the slots and now. One
// node acts on it (the first live supervisor by name; a split view makes
// two try, and the check-index on the state key lets one win), and every
// transition is one transaction with its audit record. A holder whose
// instance is not healthy within healthy_deadline fails the deployment
// itself, in the same way.

// Deployment statuses.
const (
	DeployRunning    = "running"
	DeploySuccessful = "successful"
	DeployFailed     = "failed"
	DeployCancelled  = "cancelled"
)

// DeployState is deploy/<name>/state/<n>.
type DeployState struct {
	N       uint64    `json:"n"`
	Hash    string    `json:"hash"`
	Status  string    `json:"status"`
	Started time.Time `json:"started"`
	// At is the last transition.
	At time.Time `json:"at"`
	// Canaries: for each unit updated with a canary phase, how many of its
	// slots (0 to c-1) move to the new version before promotion.
	Canaries map[string]int `json:"canaries,omitempty"`
	// Promoted: the canary phase is over (or there is none).
	Promoted bool `json:"promoted,omitempty"`
	// RevertOf: this deployment reverts failed deployment n;
	// RevertedTo: (a failed one) the deployment that reverted it.
	RevertOf   uint64 `json:"revert_of,omitempty"`
	RevertedTo uint64 `json:"reverted_to,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Stable is deploy/<name>/stable: the last successful deployment, which
// auto_revert goes back to.
type Stable struct {
	N    uint64    `json:"n"`
	Hash string    `json:"hash"`
	At   time.Time `json:"at"`
}

// StateKey is deploy/<name>/state/<n>.
func StateKey(name string, n uint64) string {
	return DeployPrefix + name + "/state/" + strconv.FormatUint(n, 10)
}

// StableKey is deploy/<name>/stable.
func StableKey(name string) string { return DeployPrefix + name + "/stable" }

// Deployment is a deployment as read from Consul: its desired spec, that
// spec's state and the stable spec, with the indexes transitions check.
type Deployment struct {
	Spec         *Spec
	DesiredIndex uint64
	State        *DeployState // nil: written before deployments had states
	StateIndex   uint64
	Stable       *Stable
	// Records: the units' deployment records (the step machine's), when
	// read (Watch); Effective(*State, Spec, Records) is what happened.
	Records map[string]*UnitRecord
	// Holds: what the step machine's holders say of their holds
	// (units/<unit>/status/<k>), read with the records.
	Holds map[string]map[int]HoldStatus
	// stableSpec is the stable spec's stored value, when it was read.
	stableSpec []byte
}

// canaryPhase: slot k of unit may not move to the deployment's version yet.
func (d *Deployment) holdsBack(unit string, k int) bool {
	st := d.State
	if st == nil || st.N != d.Spec.N {
		return false
	}
	if st.Status == DeployFailed {
		return true
	}
	c := st.Canaries[unit]
	return st.Status == DeployRunning && c > 0 && !st.Promoted && k >= c
}

// running: the deployment's desired spec is being rolled out.
func (d *Deployment) running() bool {
	return d.State != nil && d.State.N == d.Spec.N && d.State.Status == DeployRunning
}

// canaries says which units of next get a canary phase coming from prev:
// those with update.canary > 0 whose definition changes (a new unit, or a
// first deployment, has nothing to compare against: no canaries).
func canaries(prev, next *Spec) map[string]int {
	if prev == nil {
		return nil
	}
	old := map[string]UnitSpec{}
	for _, u := range prev.Units() {
		old[u.Unit.Name] = u
	}
	out := map[string]int{}
	for _, u := range next.Units() {
		p := u.Unit.Placement
		o, ok := old[u.Unit.Name]
		if !ok || p == nil || p.Update.Canary <= 0 || p.Update.MaxParallel <= 0 || sameRun(o, u) {
			continue
		}
		out[u.Unit.Name] = min(p.Update.Canary, count(u))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// clockSkew is the margin a node gives a deadline computed from other
// nodes' clocks (the slots' HealthyAt) before it acts on it.
const clockSkew = 2 * time.Second

// Deploy actions (deployStep).
const (
	actNone    = ""
	actSucceed = "succeed"
	actFail    = "fail"
	actPromote = "promote"
)

type deployAction struct {
	kind   string
	unit   string // the unit that failed
	reason string
	// next: when to look again without any change (a progress deadline).
	next time.Time
}

// deployStep judges a running deployment from the slots: successful once
// every slot of every unit is held at the spec's version and was healthy
// at it; failed when a slot failed for good since it started or a unit
// made no progress (no slot newly healthy) for its progress_deadline;
// promoted when its canaries are healthy and every unit with canaries
// says auto_promote.
func deployStep(d *Deployment, slots map[string]map[int]slotKV, now time.Time) deployAction {
	if !d.running() {
		return deployAction{}
	}
	st := d.State
	complete, canariesOK := true, true
	var next time.Time
	units := d.Spec.Units()
	for _, u := range units {
		name, want, n := u.Unit.Name, runHash(u), count(u)
		healthy := 0
		progress := st.Started
		for k := range n {
			s, ok := slots[name][k]
			if ok && s.value.State == SlotFailed && s.value.Since.After(st.Started) {
				return deployAction{kind: actFail, unit: name,
					reason: fmt.Sprintf("slot %s failed: %s", slotName(name, k), s.value.Reason)}
			}
			if at, healthyAt := s.at(want); ok && at && healthyAt != nil {
				healthy++
				if healthyAt.After(progress) {
					progress = *healthyAt
				}
				continue
			}
			if k < st.Canaries[name] {
				canariesOK = false
			}
		}
		if healthy == n {
			continue
		}
		complete = false
		if pd := u.Unit.Placement.Update.ProgressDeadline; pd > 0 {
			by := progress.Add(pd + clockSkew)
			if now.After(by) {
				return deployAction{kind: actFail, unit: name, reason: fmt.Sprintf(
					"no progress within progress_deadline (%s): %d of %d instances of %s healthy", pd, healthy, n, name)}
			}
			if next.IsZero() || by.Before(next) {
				next = by
			}
		}
	}
	if complete {
		return deployAction{kind: actSucceed}
	}
	if !st.Promoted && len(st.Canaries) > 0 && canariesOK {
		auto := true
		for _, u := range units {
			if st.Canaries[u.Unit.Name] > 0 && !u.Unit.Placement.Update.AutoPromote {
				auto = false
			}
		}
		if auto {
			return deployAction{kind: actPromote, next: next}
		}
	}
	return deployAction{next: next}
}

// ReadDeployment reads deployment name with consistent reads: what a
// transition checks against.
func ReadDeployment(client *api.Client, name string) (*Deployment, error) {
	q := &api.QueryOptions{RequireConsistent: true}
	pairs, _, err := client.KV().List(DeployPrefix+name+"/", q)
	if err != nil {
		return nil, err
	}
	var report error
	deps := parseDeployments(pairs, func(key, msg string, err error) {
		if report == nil {
			report = fmt.Errorf("%s: %s: %v", key, msg, err)
		}
	})
	d := deps[name]
	if d == nil {
		if report != nil {
			return nil, report
		}
		return nil, fmt.Errorf("no deployment %q: deploy it first", name)
	}
	return d, nil
}

// transition moves deployment d's state from running, in one transaction
// that checks the state has not moved since it was read; extra ops go with
// it. false: it had moved.
func transition(client *api.Client, d *Deployment, st DeployState, extra api.TxnOps) (bool, error) {
	b, _ := json.Marshal(st)
	ops := append(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: StateKey(d.Spec.Name, st.N), Index: d.StateIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: StateKey(d.Spec.Name, st.N), Value: b}},
	}, extra...)
	ok, _, _, err := client.Txn().Txn(ops, nil)
	return ok, err
}

// Succeed marks d successful and its spec stable.
func succeed(client *api.Client, d *Deployment, node string, now time.Time) (bool, error) {
	st := *d.State
	st.Status, st.At, st.Reason = DeploySuccessful, now, ""
	stable, _ := json.Marshal(Stable{N: st.N, Hash: st.Hash, At: now})
	return transition(client, d, st, api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: StableKey(d.Spec.Name), Value: stable}},
		AuditOp(AuditEvent{At: now, Node: node, Service: d.Spec.Name, Action: "deploy-successful",
			To: strconv.FormatUint(st.N, 10), Reason: "every instance healthy at " + stateReason(d, st.Hash)}),
	})
}

// ErrNoCanaries: promote found no canary phase to end.
var ErrNoCanaries = errors.New("no canaries wait for promotion")

// Promote ends the canary phase of deployment name's running deployment:
// the other instances then move to it, max_parallel at a time.
func Promote(client *api.Client, name, by string) (uint64, error) {
	d, err := ReadDeployment(client, name)
	if err != nil {
		return 0, err
	}
	if !d.running() {
		return 0, fmt.Errorf("deployment %s/%d is %s: %w", name, d.Spec.N, d.statusWord(), ErrNoCanaries)
	}
	var units []string
	for _, u := range d.Spec.Units() {
		units = append(units, u.Unit.Name)
	}
	pairs, recs, err := readRecords(client, units)
	if err != nil {
		return 0, err
	}
	if eff := Effective(*d.State, d.Spec, recs); eff.Status != DeployRunning {
		return 0, fmt.Errorf("deployment %s/%d is %s: %w", name, d.Spec.N, eff.Status, ErrNoCanaries)
	} else if len(d.State.Canaries) == 0 || eff.Promoted {
		return 0, fmt.Errorf("deployment %s/%d: %w", name, d.Spec.N, ErrNoCanaries)
	}
	ok, err := promote(client, d, "-", by, time.Now().UTC(), promoteRecords(SpecVersion(name, d.Spec.N), pairs, recs)...)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("deployment %s/%d changed while it was being promoted; look at it again with mariposa status", name, d.Spec.N)
	}
	return d.Spec.N, nil
}

// promoteRecords ends the canary phase in the units' records of spec
// version sv (the step machine's; the operator's write, checked against
// the record read).
func promoteRecords(sv string, pairs map[string]*api.KVPair, recs map[string]*UnitRecord) api.TxnOps {
	var ops api.TxnOps
	for _, u := range sortedKeys(recs) {
		r := *recs[u]
		if r.Spec != sv || r.Status != DeployRunning || r.Canaries == 0 || r.Promoted || r.RevertOf != 0 {
			continue
		}
		r.Promoted = true
		ops = append(ops,
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: RecordKey(u), Index: pairs[u].ModifyIndex}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: RecordKey(u), Value: r.Encode()}})
	}
	return ops
}

func promote(client *api.Client, d *Deployment, node, actor string, now time.Time, extra ...*api.TxnOp) (bool, error) {
	st := *d.State
	st.Promoted, st.At = true, now
	reason := "promoted by " + actor
	if actor == "" {
		reason = "auto_promote: every canary healthy"
	}
	return transition(client, d, st, append(api.TxnOps{AuditOp(AuditEvent{At: now, Node: node, Actor: actor, Service: d.Spec.Name,
		Action: "deploy-promote", To: strconv.FormatUint(st.N, 10), Reason: reason})}, extra...))
}

func (d *Deployment) statusWord() string {
	if d.State == nil || d.State.N != d.Spec.N {
		return "without a state (deployed by an older mariposa)"
	}
	return d.State.Status
}

// fail marks d failed because of unit, and, when the unit's update block
// says auto_revert and a stable spec other than d's exists, makes a copy
// of the stable spec desired as spec n+1, running, with no canary phase:
// all in one transaction, with the records. extra goes with it (the
// version's rollout failure).
func fail(client *api.Client, d *Deployment, unit, reason, node string, now time.Time, extra api.TxnOps) (bool, error) {
	st := *d.State
	name, n := d.Spec.Name, st.N
	st.Status, st.At, st.Reason = DeployFailed, now, reason
	ops := append(api.TxnOps{}, extra...)
	ops = append(ops, AuditOp(AuditEvent{At: now, Node: node, Service: name, Slot: unit, Action: "deploy-failed",
		To: strconv.FormatUint(n, 10), Reason: reason}))
	if revert := d.revertSpec(unit, now); revert != nil {
		st.RevertedTo = revert.N
		body, err := revert.Encode()
		if err != nil {
			return false, err
		}
		next, _ := json.Marshal(DeployState{N: revert.N, Hash: revert.Hash, Status: DeployRunning, Started: now, At: now,
			Promoted: true, RevertOf: n})
		des, _ := json.Marshal(Desired{N: revert.N, Hash: revert.Hash, By: revert.By, At: now})
		ops = append(ops,
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: SpecKey(name, revert.N)}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: SpecKey(name, revert.N), Value: body}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: DesiredKey(name), Index: d.DesiredIndex}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: DesiredKey(name), Value: des}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: StateKey(name, revert.N), Value: next}},
			AuditOp(AuditEvent{At: now, Node: node, Service: name, Action: "deploy-revert",
				From: strconv.FormatUint(n, 10), To: strconv.FormatUint(revert.N, 10),
				Reason: fmt.Sprintf("auto_revert to stable spec %d (%s)", d.Stable.N, d.Stable.Hash)}))
	}
	return transition(client, d, st, ops)
}

// revertSpec is the spec auto_revert deploys after d fails because of
// unit, or nil: a copy of the stable spec as spec n+1.
func (d *Deployment) revertSpec(unit string, now time.Time) *Spec {
	if d.Stable == nil || d.Stable.N == d.Spec.N || d.Stable.Hash == d.Spec.Hash || d.stableSpec == nil {
		return nil
	}
	auto := false
	for _, u := range d.Spec.Units() {
		if u.Unit.Name == unit && u.Unit.Placement != nil {
			auto = u.Unit.Placement.Update.AutoRevert
		}
	}
	if !auto {
		return nil
	}
	sp, err := DecodeSpec(d.stableSpec)
	if err != nil {
		return nil
	}
	sp.N, sp.By, sp.At = d.Spec.N+1, "auto-revert", now
	return sp
}

// failDeployment fails the running deployment that unit's version hash
// belongs to, read afresh; the rollout's failure mark goes in the same
// transaction. Without a running deployment of that version (a unit from
// a node's own files, or a deployment already judged) only the mark is
// written.
func (f *Fleet) failDeployment(ctx context.Context, unit, hash, slot, reason string, termIndex uint64) error {
	now := f.cfg.Now()
	mark, _ := json.Marshal(map[string]any{"at": now, "node": f.cfg.Node, "slot": slot, "reason": reason})
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: rolloutFailedKey(unit, hash), Value: mark}},
		AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Service: unit, Slot: slot, Action: "rollout-failed",
			To: hash, Reason: reason, TermIndex: termIndex}),
	}
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		name := f.deploymentNameOf(unit)
		var d *Deployment
		if name != "" {
			var err error
			if d, err = ReadDeployment(f.cfg.Client, name); err != nil {
				return err
			}
		}
		if d == nil || !d.running() || !specHasVersion(d.Spec, unit, hash) {
			_, _, _, err := f.cfg.Client.Txn().Txn(ops, nil)
			return err
		}
		f.mu.Lock()
		_, paused := f.pausedLocked(unit, PauseDeploy)
		f.mu.Unlock()
		if paused {
			d.stableSpec = nil // deploys paused: no auto_revert
		}
		ok, err := fail(f.cfg.Client, d, unit, slot+": "+reason, f.cfg.Node, now, ops)
		if err != nil || ok {
			return err
		}
	}
	return errors.New("the deployment kept changing while it was being failed")
}

func specHasVersion(sp *Spec, unit, hash string) bool {
	for _, u := range sp.Units() {
		if u.Unit.Name == unit {
			return runHash(u) == hash
		}
	}
	return false
}

// deploymentNameOf is the deployment unit is deployed by, or "".
func (f *Fleet) deploymentNameOf(unit string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deploymentOfLocked(unit)
}

func (f *Fleet) deploymentOfLocked(unit string) string {
	for _, n := range sortedKeys(f.remote) {
		for _, u := range f.remote[n].Spec.Units() {
			if u.Unit.Name == unit {
				return n
			}
		}
	}
	return ""
}

// judge runs deployStep on every running deployment when this node is
// the first live supervisor by name, and acts on it. It returns when to
// look again without a change (zero: no deadline ahead).
func (f *Fleet) judge(ctx context.Context, now time.Time) time.Duration {
	f.mu.Lock()
	if !f.haveSl || !f.haveNd || !f.firstLiveLocked() {
		f.mu.Unlock()
		return 0
	}
	type todo struct {
		name string
		act  deployAction
	}
	var acts []todo
	var next time.Duration
	for name, d := range f.remote {
		a := deployStep(d, f.slots, now)
		if a.kind != actNone && !f.judging[name] {
			if f.judging == nil {
				f.judging = map[string]bool{}
			}
			f.judging[name] = true
			acts = append(acts, todo{name, a})
		}
		if !a.next.IsZero() {
			if in := a.next.Sub(now); next == 0 || in < next {
				next = max(in, 100*time.Millisecond)
			}
		}
	}
	f.mu.Unlock()
	for _, t := range acts {
		go func() {
			defer func() {
				f.mu.Lock()
				delete(f.judging, t.name)
				f.mu.Unlock()
			}()
			if err := f.act(ctx, t.name, t.act); err != nil && ctx.Err() == nil {
				f.log.Warn("could not move the deployment on; trying again at the next change", "deployment", t.name,
					"action", t.act.kind, "error", err)
			}
		}()
	}
	return next
}

// act carries out a, judged on the watched state, after judging again on
// a consistent read (the check-index on the state key is what makes it
// safe; the fresh read only saves a doomed transaction).
func (f *Fleet) act(ctx context.Context, name string, a deployAction) error {
	d, err := ReadDeployment(f.cfg.Client, name)
	if err != nil {
		return err
	}
	pairs, _, err := f.cfg.Client.KV().List(SlotsPrefix, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return err
	}
	now := f.cfg.Now()
	a = deployStep(d, parseSlots(pairs, func(string, string, error) {}), now)
	var ok bool
	switch a.kind {
	case actSucceed:
		ok, err = succeed(f.cfg.Client, d, f.cfg.Node, now)
	case actPromote:
		ok, err = promote(f.cfg.Client, d, f.cfg.Node, "", now)
	case actFail:
		f.mu.Lock()
		_, paused := f.pausedLocked(a.unit, PauseDeploy)
		f.mu.Unlock()
		if paused {
			d.stableSpec = nil // deploys paused: no auto_revert
		}
		ok, err = fail(f.cfg.Client, d, a.unit, a.reason, f.cfg.Node, now, nil)
	default:
		return nil
	}
	if err == nil && ok {
		f.log.Info("deployment moved on", "deployment", name, "spec", d.Spec.N, "action", a.kind, "reason", a.reason)
	}
	return err
}

// firstLiveLocked: this node is the first live supervisor by name.
func (f *Fleet) firstLiveLocked() bool {
	for _, n := range f.nodes {
		if n.Live && n.Name < f.cfg.Node {
			return false
		}
	}
	return true
}

// parseDeployments reads deploy/: each deployment's desired spec, its
// state and the stable spec. Corrupt values are reported and the
// deployment skipped (a corrupt state or stable pointer only loses what
// it says).
func parseDeployments(pairs api.KVPairs, report func(key, msg string, err error)) map[string]*Deployment {
	byKey := map[string]*api.KVPair{}
	for _, p := range pairs {
		byKey[p.Key] = p
	}
	out := map[string]*Deployment{}
	for _, p := range pairs {
		rest := strings.TrimPrefix(p.Key, DeployPrefix)
		name, tail, ok := strings.Cut(rest, "/")
		if !ok || tail != "desired" {
			continue
		}
		var des Desired
		if err := json.Unmarshal(p.Value, &des); err != nil {
			report(p.Key, "a corrupt desired pointer; skipping the deployment", err)
			continue
		}
		sp := byKey[SpecKey(name, des.N)]
		if sp == nil {
			report(p.Key, "the desired spec is missing; skipping the deployment", nil)
			continue
		}
		spec, err := DecodeSpec(sp.Value)
		if err != nil {
			report(sp.Key, "cannot read the spec; skipping the deployment", err)
			continue
		}
		d := &Deployment{Spec: spec, DesiredIndex: p.ModifyIndex}
		if sp := byKey[StateKey(name, des.N)]; sp != nil {
			var st DeployState
			if err := json.Unmarshal(sp.Value, &st); err != nil || st.N != des.N {
				report(sp.Key, "a corrupt deployment state; the deployment is not judged until it is fixed", err)
			} else {
				d.State, d.StateIndex = &st, sp.ModifyIndex
			}
		}
		if sp := byKey[StableKey(name)]; sp != nil {
			var stable Stable
			if err := json.Unmarshal(sp.Value, &stable); err != nil {
				report(sp.Key, "a corrupt stable pointer; no auto_revert until it is fixed", err)
			} else {
				d.Stable = &stable
				if b := byKey[SpecKey(name, stable.N)]; b != nil {
					d.stableSpec = b.Value
				}
			}
		}
		out[name] = d
	}
	return out
}

// UnitProgress is how far one unit of a deployment got.
type UnitProgress struct {
	Unit  string `json:"unit"`
	Count int    `json:"count"`
	// AtVersion slots are held at the spec's version; Healthy of them
	// were healthy at it; Canaries is the unit's canary phase (0: none).
	AtVersion int `json:"at_version"`
	Healthy   int `json:"healthy"`
	Canaries  int `json:"canaries,omitempty"`
}

// Progress is d's progress per unit, from the slots and, when live is not
// nil, from what live says of each slot's instances now (held at node):
// a slot counts as healthy when its holder said it was healthy at the
// version in this hold and live says its instances are healthy now.
func Progress(d *Deployment, slots map[string]map[int]slotKV, live func(unit string, k int, node string) bool) []UnitProgress {
	var out []UnitProgress
	for _, u := range d.Spec.Units() {
		p := UnitProgress{Unit: u.Unit.Name, Count: count(u)}
		if d.State != nil && d.State.N == d.Spec.N {
			p.Canaries = d.State.Canaries[u.Unit.Name]
		}
		want := runHash(u)
		for k := range p.Count {
			at, healthyAt := slots[u.Unit.Name][k].at(want)
			if !at {
				continue
			}
			p.AtVersion++
			if healthyAt != nil && (live == nil || live(u.Unit.Name, k, slots[u.Unit.Name][k].value.Node)) {
				p.Healthy++
			}
		}
		if r := d.Records[u.Unit.Name]; r != nil && r.Spec == SpecVersion(d.Spec.Name, d.Spec.N) && p.AtVersion == 0 {
			// The step machine's progress: its holders' statuses at the
			// record's version (cluster.Fleet's slot statuses say none).
			if p.Canaries == 0 && !r.Promoted {
				p.Canaries = r.Canaries
			}
			for k := range p.Count {
				hs, ok := d.Holds[u.Unit.Name][k]
				if !ok || hs.Version != r.Version {
					continue
				}
				p.AtVersion++
				if hs.HealthyAt != nil && (live == nil || live(u.Unit.Name, k, slots[u.Unit.Name][k].value.Node)) {
					p.Healthy++
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// parseUnitKeys reads what is under units/: each unit's record and its
// holders' statuses; report says what cannot be read.
func parseUnitKeys(pairs api.KVPairs, report func(key, msg string, err error)) (map[string]*UnitRecord, map[string]map[int]HoldStatus) {
	records, holds := map[string]*UnitRecord{}, map[string]map[int]HoldStatus{}
	for _, p := range pairs {
		unit, _, _ := strings.Cut(strings.TrimPrefix(p.Key, UnitsPrefix), "/")
		kind, k, ok := ParseUnitDeployKey(unit, p.Key)
		switch {
		case !ok:
		case kind == UnitKeyRecord:
			if r, err := DecodeUnitRecord(p.Value); err != nil {
				report(p.Key, "a corrupt deployment record; its deployment is told by its state", err)
			} else {
				records[unit] = r
			}
		case kind == UnitKeyStatus:
			var hs HoldStatus
			if json.Unmarshal(p.Value, &hs) == nil {
				if holds[unit] == nil {
					holds[unit] = map[int]HoldStatus{}
				}
				holds[unit][k] = hs
			}
		}
	}
	return records, holds
}

// Watch reads deployment name and its progress: a blocking query on the
// slots from index (0: at once; it returns within a second when nothing
// changes, so that a state change without a slot change is seen), then a
// read of the deployment. It returns the index to wait from next.
func Watch(ctx context.Context, client *api.Client, name string, index uint64) (*Deployment, []UnitProgress, uint64, error) {
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: time.Second}).WithContext(ctx)
	sl, meta, err := client.KV().List(SlotsPrefix, q)
	if err != nil {
		return nil, nil, index, err
	}
	dep, _, err := client.KV().List(DeployPrefix+name+"/", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, nil, index, err
	}
	d := parseDeployments(dep, func(string, string, error) {})[name]
	if d == nil {
		return nil, nil, meta.LastIndex, fmt.Errorf("no deployment %q", name)
	}
	var units []string
	for _, u := range d.Spec.Units() {
		units = append(units, u.Unit.Name)
	}
	d.Records, d.Holds = map[string]*UnitRecord{}, map[string]map[int]HoldStatus{}
	for _, u := range units {
		// One unit's record and statuses (a few keys): never the whole
		// units/ prefix.
		pairs, _, err := client.KV().List(UnitDeployPrefix(u), (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, nil, index, err
		}
		recs, holds := parseUnitKeys(pairs, func(string, string, error) {})
		maps.Copy(d.Records, recs)
		maps.Copy(d.Holds, holds)
	}
	return d, Progress(d, parseSlots(sl, func(string, string, error) {}), nil), meta.LastIndex, nil
}

// ReadDeployState reads deploy/<name>/state/<n> (nil when absent).
func ReadDeployState(client *api.Client, name string, n uint64) (*DeployState, error) {
	p, _, err := client.KV().Get(StateKey(name, n), &api.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil {
		return nil, err
	}
	var st DeployState
	if err := json.Unmarshal(p.Value, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Key, err)
	}
	return &st, nil
}

// VersionOf is how unit of sp runs its instances (the run hash its
// holders publish in their slots), or "" when sp has no such unit.
func VersionOf(sp *Spec, unit string) string {
	for _, u := range sp.Units() {
		if u.Unit.Name == unit {
			return runHash(u)
		}
	}
	return ""
}

// agentSlotVersion is the version slot k of unit runs under the step
// machine, held with fencing token index: the version its holder's status
// (UnitStatusKey) says in this hold, else the one a slot claimed under the
// unit's record starts at (UnitRecord.StartVersion), if the hold is newer
// than the record; "" when neither says. The op checks that what it read
// has not moved.
func agentSlotVersion(client *api.Client, unit string, k int, index uint64) (string, *api.TxnOp, error) {
	sp, _, err := client.KV().Get(UnitStatusKey(unit, k), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return "", nil, err
	}
	var st HoldStatus
	if sp != nil && json.Unmarshal(sp.Value, &st) == nil && st.Index == index && st.Version != "" {
		return st.Version, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: sp.Key, Index: sp.ModifyIndex}}, nil
	}
	rp, _, err := client.KV().Get(RecordKey(unit), &api.QueryOptions{RequireConsistent: true})
	if err != nil || rp == nil || rp.ModifyIndex >= index {
		return "", nil, err
	}
	r, err := DecodeUnitRecord(rp.Value)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", rp.Key, err)
	}
	return r.StartVersion(k), &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: rp.Key, Index: rp.ModifyIndex}}, nil
}

// MarkHealthy is an operator saying that slot k of unit is healthy at the
// version it runs (health_check = "manual"): rollout/<unit>/<version>/
// healthy/<k> and its record, in one transaction that fails if the slot
// changed since it was read. It returns that version.
func MarkHealthy(client *api.Client, unit string, k int, by string) (string, error) {
	key := SlotKey(unit, k)
	p, _, err := client.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return "", err
	}
	if p == nil || p.Session == "" {
		return "", fmt.Errorf("slot %s/%d is not held: no instance to mark healthy", unit, k)
	}
	v, err := DecodeSlotValue(p.Value)
	if err != nil {
		return "", fmt.Errorf("slot %s/%d: %w", unit, k, err)
	}
	checks := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: p.ModifyIndex}}}
	sp, _, err := client.KV().Get(StatusKey(unit, k), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return "", err
	}
	s := slotKV{value: v, session: p.Session, modifyIndex: p.ModifyIndex}
	var st HoldStatus
	if sp != nil && json.Unmarshal(sp.Value, &st) == nil && st.Index == p.ModifyIndex {
		// The version the holder moved to since its claim: it must not
		// move on while it is marked.
		checks = append(checks, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: sp.Key, Index: sp.ModifyIndex}})
	}
	if hs := holdStatus(s, st); hs != nil {
		v.Version = hs.Version
	}
	if v.Version == "" {
		// The step machine's slot keys carry no version (the key is never
		// written while held): its holder's status says it, else the
		// record it was claimed under.
		ver, check, err := agentSlotVersion(client, unit, k, p.ModifyIndex)
		if err != nil {
			return "", err
		}
		v.Version = ver
		if check != nil {
			checks = append(checks, check)
		}
	}
	if v.Version == "" {
		return "", fmt.Errorf("slot %s/%d does not say which version it runs (its node's mariposa is older)", unit, k)
	}
	now := time.Now().UTC()
	b, _ := json.Marshal(map[string]any{"by": by, "at": now, "node": v.Node})
	ok, _, _, err := client.Txn().Txn(append(checks,
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: ManualHealthKey(unit, v.Version, k), Value: b}},
		AuditOp(AuditEvent{At: now, Node: "-", Actor: by, Service: unit, Slot: slotName(unit, k), Action: "mark-healthy",
			To: v.Version, Reason: "health_check manual: marked healthy on " + v.Node})), nil)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("slot %s/%d changed while it was being marked; look at it again with mariposa status", unit, k)
	}
	return v.Version, nil
}
