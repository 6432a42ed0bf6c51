package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Stopping and removing a deployment (mariposa deploy stop [-purge]).
//
// A stop makes a spec with no units desired, through Deploy (it supersedes
// a deployment still rolling out): every node stops its instances of the
// deployment's units and releases their slots, as for any unit no longer
// deployed, and the deployment stays listed, stopped, with its history.
// A purge then waits for those slots to be released and deletes the
// deployment's records (deploy/<name>/) and its units' slot keys, so that
// nothing of it is listed any more; the audit log keeps the story.

// StopResult says what StopDeployment did.
type StopResult struct {
	N uint64 // the empty spec now desired
	// Units are the units that stop (the previous desired spec's).
	Units []string
	// AlreadyStopped: the desired spec had no units already.
	AlreadyStopped bool
	// Superseded is the running deployment the stop cancelled.
	Superseded uint64
}

// ErrNoDeployment: no deployment of that name.
var ErrNoDeployment = errors.New("no such deployment")

// EmptySpec is the spec of a stopped deployment: no units.
func EmptySpec(name string) *Spec {
	sp := &Spec{Format: SpecFormat, Name: name}
	sp.Format = formatOf(sp)
	sp.Hash = HashOf(sp)
	return sp
}

// StopDeployment makes deployment name's desired spec the empty one.
func StopDeployment(client *api.Client, name, by string) (StopResult, error) {
	cur, err := DesiredSpec(client, name)
	if err != nil {
		return StopResult{}, err
	}
	if cur == nil {
		return StopResult{}, fmt.Errorf("deployment %q: %w (mariposa status lists the deployments)", name, ErrNoDeployment)
	}
	var units []string
	for _, u := range cur.Units() {
		units = append(units, u.Unit.Name)
	}
	res, err := Deploy(client, EmptySpec(name), DeployOptions{By: by, Force: true, Stop: true})
	if err != nil {
		return StopResult{}, err
	}
	return StopResult{N: res.N, Units: units, AlreadyStopped: res.Unchanged, Superseded: res.Superseded}, nil
}

// PurgeResult says what PurgeDeployment deleted.
type PurgeResult struct {
	Keys      int // records under deploy/<name>/
	SlotKeys  int // slot keys of its units
	Units     []string
	Desired   uint64
	Remaining []string // slots still held when the wait ended (an error)
}

// PurgeDeployment deletes a stopped deployment's records and its units'
// slot keys once no slot of them is held, waiting up to wait (every 250ms)
// for their holders to release them. The deployment must be stopped (its
// desired spec has no units). Units that another deployment now runs keep
// their slot keys. The deletion of deploy/<name>/ checks that its desired
// spec has not moved, and is one transaction with its audit record.
func PurgeDeployment(ctx context.Context, client *api.Client, name, by string, wait time.Duration) (PurgeResult, error) {
	q := &api.QueryOptions{RequireConsistent: true}
	pairs, _, err := client.KV().List(DeployPrefix, q)
	if err != nil {
		return PurgeResult{}, err
	}
	deps := parseDeployments(pairs, func(string, string, error) {})
	d, ok := deps[name]
	var desired *api.KVPair
	var res PurgeResult
	units := map[string]bool{}
	for _, p := range pairs {
		rest, ok := strings.CutPrefix(p.Key, DeployPrefix+name+"/")
		if !ok {
			continue
		}
		res.Keys++
		switch {
		case rest == "desired":
			desired = p
		case strings.HasPrefix(rest, "spec/"):
			if sp, err := DecodeSpec(p.Value); err == nil {
				for _, u := range sp.Units() {
					units[u.Unit.Name] = true
				}
			}
		}
	}
	if res.Keys == 0 {
		return PurgeResult{}, fmt.Errorf("deployment %q: %w", name, ErrNoDeployment)
	}
	if ok && len(d.Spec.Units()) > 0 {
		return PurgeResult{}, fmt.Errorf("deployment %s runs spec %d, with units: stop it first (mariposa deploy stop -purge %s)", name, d.Spec.N, name)
	}
	if ok {
		res.Desired = d.Spec.N
	}
	// A unit another deployment runs now is its own.
	for other, od := range deps {
		if other == name {
			continue
		}
		for _, u := range od.Spec.Units() {
			delete(units, u.Unit.Name)
		}
	}
	for u := range units {
		res.Units = append(res.Units, u)
	}
	sort.Strings(res.Units)

	var slots api.KVPairs
	deadline := time.Now().Add(wait)
	for {
		slots = slots[:0]
		var held []string
		for _, u := range res.Units {
			ps, _, err := client.KV().List(SlotsPrefix+u+"/", q)
			if err != nil {
				return res, err
			}
			for _, p := range ps {
				if _, _, ok := parseSlotKey(p.Key); !ok {
					continue
				}
				slots = append(slots, p)
				if p.Session != "" {
					held = append(held, strings.TrimPrefix(p.Key, SlotsPrefix))
				}
			}
		}
		if len(held) == 0 {
			break
		}
		if !time.Now().Before(deadline) {
			res.Remaining = held
			return res, fmt.Errorf("%d slot(s) still held after %s (%s): their holders release them once their instances stop; run mariposa deploy stop -purge %s again then",
				len(held), wait, strings.Join(held, ", "), name)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	now := time.Now().UTC()
	// The deployment's records and the audit record first, checked against
	// a desired spec that has not moved: a deploy in between wins.
	ops := api.TxnOps{}
	if desired != nil {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: desired.Key, Index: desired.ModifyIndex}})
	}
	ops = append(ops,
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: DeployPrefix + name + "/"}})
	for _, u := range res.Units {
		// What the step machine kept of the unit (its record went with
		// the stop; a status or token left by a holder gone).
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: UnitDeployPrefix(u)}})
	}
	ops = append(ops,
		AuditOp(AuditEvent{At: now, Node: "-", Actor: by, Service: name, Action: "purge",
			Reason: fmt.Sprintf("%d records and the slot keys of %s deleted", res.Keys, strings.Join(res.Units, ", "))}))
	okTxn, _, _, err := client.Txn().Txn(ops, nil)
	if err != nil {
		return res, err
	}
	if !okTxn {
		return res, fmt.Errorf("deployment %s changed while it was being purged (a deploy?): look again with mariposa status", name)
	}
	// Then the free slot keys, each only as read (a key claimed again in
	// between stays).
	for _, p := range slots {
		if ok, _, err := client.KV().DeleteCAS(&api.KVPair{Key: p.Key, ModifyIndex: p.ModifyIndex}, nil); err == nil && ok {
			res.SlotKeys++
		}
	}
	return res, nil
}
