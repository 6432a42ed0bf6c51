package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// A deployment's state (CLUSTER.md section 5, items 1, 5 and 6). Every
// spec n that a deploy makes desired gets deploy/<name>/state/<n>, written
// in the deploy's own transaction: running (with its canary phase), and
// cancelled when a later deploy (-force, or mariposa deploy stop)
// supersedes it while it runs; mariposa deploy promote marks it promoted.
// Nothing else writes it: the fleet's step machine (fleet/agent) judges a
// deployment in its units' records (UnitRecord, units/<unit>/record) and
// never moves the state, so what became of spec n is Effective(state,
// spec, records):
//
//	            deploy            all slots healthy at the spec
//	(none) ─────────────▶ running ─────────────────────────────▶ successful
//	                        │  │                                 (stable = n)
//	                        │  └──────────▶ cancelled  (a newer deploy, -force)
//	                        ▼
//	                      failed ──▶ auto_revert: the stable version again,
//	                                 no canary phase, same update block

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
	// RevertOf: this deployment reverts failed deployment n. (A
	// reverted_to field older fleets wrote on the failed one is ignored:
	// nothing wrote it since the step machine.)
	RevertOf uint64 `json:"revert_of,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// StateKey is deploy/<name>/state/<n>.
func StateKey(name string, n uint64) string {
	return DeployPrefix + name + "/state/" + strconv.FormatUint(n, 10)
}

// Deployment is a deployment as read from Consul: its desired spec, that
// spec's state and its units' records, with the indexes transitions check.
type Deployment struct {
	Spec         *Spec
	DesiredIndex uint64
	State        *DeployState // nil: written before deployments had states
	StateIndex   uint64
	// Records: the units' deployment records (the step machine's), when
	// read (Watch); Effective(*State, Spec, Records) is what happened.
	Records map[string]*UnitRecord
	// Holds: what the step machine's holders say of their holds
	// (units/<unit>/status/<k>), read with the records.
	Holds map[string]map[int]HoldStatus
}

// StableN is the deployment's last successful spec, which auto_revert goes
// back to: the one its units' records name as their stable version
// ("<name>/<n>"), the oldest when they differ (a unit whose record says
// nothing of this deployment is not counted); 0 when none does.
func (d *Deployment) StableN() uint64 {
	var n uint64
	for _, r := range d.Records {
		if r == nil {
			continue
		}
		name, k, err := ParseSpecVersion(r.Stable)
		if err != nil || name != d.Spec.Name || k == 0 {
			continue
		}
		if n == 0 || k < n {
			n = k
		}
	}
	return n
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
	for _, u := range slices.Sorted(maps.Keys(recs)) {
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
				report(sp.Key, "a corrupt deployment state; ignoring it until it is fixed", err)
			} else {
				d.State, d.StateIndex = &st, sp.ModifyIndex
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
			// record's version (the slots' own status keys, StatusKey,
			// are only an older mariposa's and say none).
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
