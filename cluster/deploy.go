package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
)

// deployTxnHook runs just before a deploy's transaction (tests only).
var deployTxnHook func()

// maxTxnOps is the most operations Consul takes in one transaction.
const maxTxnOps = 128

// DeployResult says what Deploy did.
type DeployResult struct {
	N         uint64 // the desired spec now
	Unchanged bool   // the same spec was desired already
	// Superseded is the running deployment this one cancelled (-force).
	Superseded uint64
	// Canaries: the units that start with a canary phase, and how many.
	Canaries map[string]int
}

// ErrConcurrentDeploy: another deploy moved the desired spec first.
var ErrConcurrentDeploy = errors.New("another deploy of this deployment happened at the same time; run it again")

// ErrInProgress: the deployment's desired spec is still being rolled out.
var ErrInProgress = errors.New("-force to supersede it now")

// OwnedError: a unit of the spec belongs to another deployment (unit names
// are unique across deployments).
type OwnedError struct {
	Unit, Owner string
	N           uint64 // the owner's desired spec
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("%q belongs to deployment %q (spec %d), and a unit's name is unique across deployments: "+
		"deploy it with -name %s, or stop it there first (mariposa deploy stop %s); nothing was deployed",
		e.Unit, e.Owner, e.N, e.Owner, e.Owner)
}

// CheckOwners refuses spec (an *OwnedError) when one of its units is a unit
// of another deployment's desired spec, naming that deployment. Deploy
// checks it before it writes; deploy checks it first, before the fit.
// (Two deploys racing with the same new unit under two names can still
// both pass: the nodes then run the first deployment's by name.)
func CheckOwners(client *api.Client, spec *Spec) error {
	pairs, _, err := client.KV().List(DeployPrefix, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, u := range spec.Units() {
		mine[u.Unit.Name] = true
	}
	deps := parseDeployments(pairs, func(string, string, error) {})
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		if name == spec.Name {
			continue
		}
		for _, u := range deps[name].Spec.Units() {
			if mine[u.Unit.Name] {
				return &OwnedError{Unit: u.Unit.Name, Owner: name, N: deps[name].Spec.N}
			}
		}
	}
	return nil
}

// DeployOptions are a deploy's operator choices.
type DeployOptions struct {
	By string // who deploys (the audit's actor)
	// Force supersedes a deployment still running (it is cancelled).
	Force bool
	// Stop: the spec is the empty one of mariposa deploy stop (recorded
	// as a stop).
	Stop bool
}

// Deploy writes spec as the deployment's next spec and makes it desired:
// the spec key is written only if absent (specs are immutable), then one
// transaction checks that desired and its state have not moved since they
// were read, moves desired, starts the new spec's state (with its canary
// phase), cancels a running one it supersedes, clears earlier failure
// marks of the versions it deploys, and records the deploy.
func Deploy(client *api.Client, spec *Spec, opts DeployOptions) (DeployResult, error) {
	kv := client.KV()
	q := &api.QueryOptions{RequireConsistent: true}
	if err := CheckOwners(client, spec); err != nil {
		return DeployResult{}, err
	}
	cur, _, err := kv.Get(DesiredKey(spec.Name), q)
	if err != nil {
		return DeployResult{}, err
	}
	var prev Desired
	var prevSpec *Spec
	var prevState *api.KVPair
	var running *DeployState
	if cur != nil {
		if err := json.Unmarshal(cur.Value, &prev); err != nil {
			return DeployResult{}, fmt.Errorf("%s holds no desired spec (%v): fix or delete it", cur.Key, err)
		}
		if prev.Hash == spec.Hash {
			return DeployResult{N: prev.N, Unchanged: true}, nil
		}
		if p, _, err := kv.Get(SpecKey(spec.Name, prev.N), q); err != nil {
			return DeployResult{}, err
		} else if p != nil {
			prevSpec, _ = DecodeSpec(p.Value) // unreadable: no canary phase
		}
		if prevState, _, err = kv.Get(StateKey(spec.Name, prev.N), q); err != nil {
			return DeployResult{}, err
		}
		if prevState != nil {
			var st DeployState
			if json.Unmarshal(prevState.Value, &st) == nil && st.Status == DeployRunning {
				running = &st
			}
		}
	}
	var units []string
	for _, u := range spec.Units() {
		units = append(units, u.Unit.Name)
	}
	if prevSpec != nil {
		for _, u := range prevSpec.Units() {
			if !slices.Contains(units, u.Unit.Name) {
				units = append(units, u.Unit.Name)
			}
		}
	}
	recPairs, recs, err := readRecords(client, units)
	if err != nil {
		return DeployResult{}, err
	}
	if running != nil && prevSpec != nil && Terminal(Effective(*running, prevSpec, recs).Status) {
		running = nil // the step machine ended it in the units' records
	}
	if running != nil && !opts.Force {
		return DeployResult{}, fmt.Errorf("deployment %s/%d in progress (%s, since %s): it ends once every instance is healthy at it, "+
			"or fails when no instance becomes healthy for %s (progress_deadline; a count no node can hold stays in progress until then); "+
			"later deploys are refused until it ends: %w", spec.Name, running.N,
			running.Hash, running.Started.UTC().Format(time.RFC3339), progressDeadline(prevSpec), ErrInProgress)
	}
	now := time.Now().UTC()
	spec.N, spec.By, spec.At = prev.N+1, opts.By, now
	b, err := spec.Encode()
	if err != nil {
		return DeployResult{}, err
	}
	res := DeployResult{N: spec.N, Canaries: canaries(prevSpec, spec)}
	d, _ := json.Marshal(Desired{N: spec.N, Hash: spec.Hash, By: opts.By, At: now})
	st, _ := json.Marshal(DeployState{N: spec.N, Hash: spec.Hash, Status: DeployRunning, Started: now, At: now,
		Canaries: res.Canaries, Promoted: len(res.Canaries) == 0})
	check := &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: DesiredKey(spec.Name)}
	if cur != nil {
		check = &api.KVTxnOp{Verb: api.KVCheckIndex, Key: DesiredKey(spec.Name), Index: cur.ModifyIndex}
	}
	ops := api.TxnOps{
		{KV: check},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: DesiredKey(spec.Name), Value: d}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: StateKey(spec.Name, spec.N), Value: st}},
	}
	if prevState != nil {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: prevState.Key, Index: prevState.ModifyIndex}})
	}
	if running != nil {
		c := *running
		c.Status, c.At, c.Reason = DeployCancelled, now, fmt.Sprintf("superseded by spec %d (-force, by %s)", spec.N, opts.By)
		if opts.Stop {
			c.Reason = fmt.Sprintf("stopped by %s (spec %d: no units)", opts.By, spec.N)
		}
		cb, _ := json.Marshal(c)
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: prevState.Key, Value: cb}})
		res.Superseded = running.N
	}
	ops = append(ops, recordOps(spec, prevSpec, recPairs, recs, res.Canaries, now)...)
	marks, _, err := kv.Keys(RolloutPrefix, "", q)
	if err != nil {
		return DeployResult{}, err
	}
	for _, u := range spec.Units() {
		if key := rolloutFailedKey(u.Unit.Name, runHash(u)); slices.Contains(marks, key) {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: key}})
		}
	}
	audit := AuditEvent{At: now, Node: "-", Actor: opts.By, Service: spec.Name, Action: "deploy",
		From: fmt.Sprint(prev.N), To: fmt.Sprint(spec.N), Reason: specReason(spec)}
	if opts.Stop {
		audit.Action, audit.Reason = "stop", "spec "+spec.Hash+" (no units): every instance stops and its slot is released"
	}
	ops = append(ops, AuditOp(audit))
	if len(ops) > maxTxnOps {
		// The units' records go in the deploy's transaction, two
		// operations each: refused before anything is written.
		return DeployResult{}, fmt.Errorf("deployment %s: deploying spec %d takes %d operations in one transaction (its units' records with it), "+
			"and Consul takes at most %d: split it into smaller deployments; nothing was deployed", spec.Name, spec.N, len(ops), maxTxnOps)
	}
	ok, _, err := kv.CAS(&api.KVPair{Key: SpecKey(spec.Name, spec.N), Value: b, ModifyIndex: 0}, nil)
	if err != nil {
		return DeployResult{}, err
	}
	if !ok {
		return DeployResult{}, concurrentDeploy(client, spec.Name, spec.N)
	}
	if deployTxnHook != nil {
		deployTxnHook()
	}
	ok, _, _, err = client.Txn().Txn(ops, nil)
	if err != nil {
		return DeployResult{}, err
	}
	if !ok {
		// Refused: desired, a state or a unit's record moved since they
		// were read (another deploy, or a judge's decision). The spec
		// written for it goes again, so that the next deploy can write
		// spec n; a refused transaction applied nothing, so nothing
		// names it.
		if p, _, err := kv.Get(SpecKey(spec.Name, spec.N), q); err == nil && p != nil && bytes.Equal(p.Value, b) {
			_, _, _ = kv.DeleteCAS(&api.KVPair{Key: p.Key, ModifyIndex: p.ModifyIndex}, nil)
		}
		if err := concurrentDeploy(client, spec.Name, spec.N); err != ErrConcurrentDeploy {
			return DeployResult{}, err
		}
		return DeployResult{}, fmt.Errorf("deployment %s changed while it was being deployed (its state or a unit's deployment record moved: "+
			"a judge's decision); nothing was deployed: run it again", spec.Name)
	}
	return res, nil
}

// concurrentDeploy is ErrConcurrentDeploy naming where the deployment is
// now, as far as a fresh read says: the spec desired since, or the spec n
// another deploy wrote and is about to make desired.
func concurrentDeploy(client *api.Client, name string, n uint64) error {
	q := &api.QueryOptions{RequireConsistent: true}
	var d Desired
	if p, _, err := client.KV().Get(DesiredKey(name), q); err == nil && p != nil && json.Unmarshal(p.Value, &d) == nil && d.N >= n {
		return fmt.Errorf("deployment %s is at spec %d (%s, by %s at %s) now: %w", name, d.N, d.Hash, d.By,
			d.At.UTC().Format(time.RFC3339), ErrConcurrentDeploy)
	}
	if p, _, err := client.KV().Get(SpecKey(name, n), q); err == nil && p != nil {
		if sp, err := DecodeSpec(p.Value); err == nil {
			return fmt.Errorf("deployment %s is moving to spec %d (%s, by %s at %s): %w", name, n, sp.Hash, sp.By,
				sp.At.UTC().Format(time.RFC3339), ErrConcurrentDeploy)
		}
	}
	return ErrConcurrentDeploy
}

// ResetSlot clears a failed slot's reschedule history so that nodes claim it
// again (mariposa reset UNIT/K), with its record, in one transaction that
// fails if the slot changed since it was read.
func ResetSlot(client *api.Client, unit string, k int, by string) error {
	key := SlotKey(unit, k)
	p, _, err := client.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("slot %s/%d has never been held: nothing to reset", unit, k)
	}
	if p.Session != "" {
		return fmt.Errorf("slot %s/%d is held; reset clears a failed slot (to restart its instance, run mariposa restart on its node)", unit, k)
	}
	v, err := DecodeSlotValue(p.Value)
	if err != nil {
		return fmt.Errorf("slot %s/%d: %w", unit, k, err)
	}
	if v.State != SlotFailed {
		// Nothing to clear (a released slot is claimed as it is); no
		// record of a reset that did nothing.
		state := v.State
		if state == "" {
			state = "no state"
		}
		return fmt.Errorf("slot %s/%d has not failed (%s): nothing to reset", unit, k, state)
	}
	now := time.Now().UTC()
	nv := SlotValue{Node: v.Node, State: SlotReleased, Since: now, Reason: "reset by " + by}
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: p.ModifyIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: nv.encode()}},
		AuditOp(AuditEvent{At: now, Node: "-", Actor: by, Service: unit, Slot: fmt.Sprintf("%s/%d", unit, k),
			Action: "reset", From: v.State, To: SlotReleased, Reason: v.Reason}),
	}
	ok, _, _, err := client.Txn().Txn(ops, nil)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the slot changed while it was being reset; look again with mariposa why")
	}
	return nil
}

// progressDeadline says the longest progress_deadline of spec's units, as
// a deploy refused for a deployment in progress tells it.
func progressDeadline(spec *Spec) string {
	var d time.Duration
	if spec != nil {
		for _, u := range spec.Units() {
			if p := u.Unit.Placement; p != nil {
				d = max(d, p.Update.ProgressDeadline)
			}
		}
	}
	if d <= 0 {
		return "its progress_deadline"
	}
	return d.String()
}

// DesiredSpec reads the spec deployment name runs now; nil (and no error)
// when it has none.
func DesiredSpec(client *api.Client, name string) (*Spec, error) {
	q := &api.QueryOptions{RequireConsistent: true}
	d, _, err := client.KV().Get(DesiredKey(name), q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", DesiredKey(name), err)
	}
	if d == nil {
		return nil, nil
	}
	var ptr Desired
	if err := json.Unmarshal(d.Value, &ptr); err != nil {
		return nil, fmt.Errorf("%s holds no desired spec (%v): fix or delete it", d.Key, err)
	}
	// Specs are immutable: the one named stays what it is even if desired
	// moves between the two reads.
	sp, _, err := client.KV().Get(SpecKey(name, ptr.N), q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", SpecKey(name, ptr.N), err)
	}
	if sp == nil {
		return nil, fmt.Errorf("%s names spec %d, but %s is missing: fix or delete it", d.Key, ptr.N, SpecKey(name, ptr.N))
	}
	spec, err := DecodeSpec(sp.Value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sp.Key, err)
	}
	return spec, nil
}

// readRecords reads the deployment records of units (consistent reads),
// with their pairs for the check-index of the deploy's transaction. A
// record that cannot be read is as good as none, but is still checked.
func readRecords(client *api.Client, units []string) (map[string]*api.KVPair, map[string]*UnitRecord, error) {
	q := &api.QueryOptions{RequireConsistent: true}
	pairs, recs := map[string]*api.KVPair{}, map[string]*UnitRecord{}
	for _, u := range units {
		p, _, err := client.KV().Get(RecordKey(u), q)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", RecordKey(u), err)
		}
		if p == nil {
			continue
		}
		pairs[u] = p
		if r, err := DecodeUnitRecord(p.Value); err == nil {
			recs[u] = r
		}
	}
	return pairs, recs, nil
}

// recordOps writes each unit's deployment record for spec (NextRecord),
// each checked against the record read (check-index, or check-not-exists
// for a unit without one), and deletes the records of the units spec no
// longer has (a deploy stop: all of them), each checked too: a judge that
// moved a record since it was read makes the deploy's transaction fail.
func recordOps(spec, prevSpec *Spec, pairs map[string]*api.KVPair, recs map[string]*UnitRecord, canaryCounts map[string]int, now time.Time) api.TxnOps {
	var ops api.TxnOps
	check := func(unit string) {
		if p := pairs[unit]; p != nil {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: RecordKey(unit), Index: p.ModifyIndex}})
		} else {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: RecordKey(unit)}})
		}
	}
	old := map[string]*UnitSpec{}
	if prevSpec != nil {
		for _, u := range prevSpec.Units() {
			old[u.Unit.Name] = &u
		}
	}
	kept := map[string]bool{}
	for _, u := range spec.Units() {
		name := u.Unit.Name
		kept[name] = true
		r := NextRecord(spec.Name, spec.N, recs[name], old[name], u, canaryCounts[name], now)
		check(name)
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: RecordKey(name), Value: r.Encode()}})
	}
	if prevSpec != nil {
		for _, u := range prevSpec.Units() {
			if name := u.Unit.Name; !kept[name] && pairs[name] != nil {
				check(name)
				ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: RecordKey(name)}})
			}
		}
	}
	return ops
}
