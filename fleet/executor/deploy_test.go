package executor_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

var rollingBlock = agent.UpdateBlock{MaxParallel: 1, MinHealthyTime: 500 * time.Millisecond, HealthyDeadline: 20 * time.Second}

// firstRecord writes unit's first deployment, v1, successful (what the
// sim's setup writes before the fleet starts).
func firstRecord(t *testing.T, unit string) func(c *api.Client) {
	return func(c *api.Client) {
		d := agent.Deployment{N: 1, Version: "v1", From: "v1", Stable: "v1", Status: cluster.DeploySuccessful, Update: rollingBlock, Started: time.Now().UTC()}
		b, _ := json.Marshal(d)
		if _, err := c.KV().Put(&api.KVPair{Key: agent.RecordKey(unit), Value: b}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// deploy is the operator's deploy, as fleet/sim's: the next record,
// check-index on the current one, with its audit record, one transaction.
func deploy(t *testing.T, c *api.Client, unit, version string) agent.Deployment {
	t.Helper()
	return deployBlock(t, c, unit, version, rollingBlock)
}

func deployBlock(t *testing.T, c *api.Client, unit, version string, block agent.UpdateBlock) agent.Deployment {
	t.Helper()
	p, _, err := c.KV().Get(agent.RecordKey(unit), &api.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil {
		t.Fatalf("record of %s: %v %v", unit, p, err)
	}
	var cur agent.Deployment
	if err := json.Unmarshal(p.Value, &cur); err != nil {
		t.Fatal(err)
	}
	next := agent.Deployment{N: cur.N + 1, Version: version, From: cur.Stable, Stable: cur.Stable, Status: cluster.DeployRunning,
		Promoted: true, Update: block, Started: time.Now().UTC()}
	if cur.Status == cluster.DeploySuccessful {
		next.From = cur.Version
	}
	if cur.Status == cluster.DeployRunning {
		next.Ended = &agent.Outcome{N: cur.N, Version: cur.Version, Status: cluster.DeployCancelled,
			Reason: fmt.Sprintf("superseded by deployment %d", next.N)}
	}
	b, _ := json.Marshal(next)
	ok, r, _, err := c.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: agent.RecordKey(unit), Index: p.ModifyIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: agent.RecordKey(unit), Value: b}},
		cluster.AuditOp(cluster.AuditEvent{At: time.Now(), Node: "-", Actor: "operator", Service: unit, Action: "deploy", To: version}),
	}, nil)
	if err != nil || !ok {
		t.Fatalf("deploy %s %s: %v %+v", unit, version, err, r)
	}
	return next
}

func record(t *testing.T, c *api.Client, unit string) agent.Deployment {
	t.Helper()
	p, _, err := c.KV().Get(agent.RecordKey(unit), &api.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil {
		t.Fatalf("record of %s: %v %v", unit, p, err)
	}
	var d agent.Deployment
	if err := json.Unmarshal(p.Value, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// updating is the checker of max_parallel: the most instances of unit
// down for an update at once, from the runner's events: a slot is down
// from its update's stop until its new instance passes its checks, plus
// min_healthy_time (the holder keeps its token that long: the next update
// cannot start before).
func updating(events []event, unit string, minHealthy time.Duration) (int, []string) {
	type span struct {
		slot     agent.SlotID
		from, to time.Time
	}
	open := map[agent.SlotID]time.Time{}
	var spans []span
	for _, e := range events {
		if e.slot.Unit != unit {
			continue
		}
		switch {
		case e.update && !e.start:
			open[e.slot] = e.at
		case e.healthy:
			if from, ok := open[e.slot]; ok {
				spans = append(spans, span{e.slot, from, e.at.Add(minHealthy)})
				delete(open, e.slot)
			}
		}
	}
	for id, from := range open {
		spans = append(spans, span{id, from, time.Now()})
	}
	most := 0
	var why []string
	for _, s := range spans {
		n := 0
		var with []string
		for _, o := range spans {
			if !o.from.After(s.from) && o.to.After(s.from) {
				n++
				with = append(with, o.slot.String())
			}
		}
		if n > most {
			most = n
			sort.Strings(with)
			why = append(why, fmt.Sprintf("at %s: %s", s.from.Format("15:04:05.000"), strings.Join(with, ", ")))
		}
	}
	return most, why
}

func TestUpdatingChecker(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	a, b := agent.SlotID{Unit: "web", K: 0}, agent.SlotID{Unit: "web", K: 1}
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		events []event
		want   int
	}{
		{"one after the other", []event{{at: t0, slot: a, update: true}, {at: t0.Add(10 * ms), slot: a, healthy: true},
			{at: t0.Add(600 * ms), slot: b, update: true}, {at: t0.Add(700 * ms), slot: b, healthy: true}}, 1},
		{"within min_healthy_time", []event{{at: t0, slot: a, update: true}, {at: t0.Add(10 * ms), slot: a, healthy: true},
			{at: t0.Add(200 * ms), slot: b, update: true}, {at: t0.Add(300 * ms), slot: b, healthy: true}}, 2},
		{"never healthy", []event{{at: t0, slot: a, update: true}, {at: t0.Add(time.Second), slot: b, update: true}}, 2},
		{"a start is no update", []event{{at: t0, slot: a, start: true}, {at: t0, slot: b, start: true}}, 0},
	} {
		if got, why := updating(tc.events, "web", 500*ms); got != tc.want {
			t.Errorf("%s: %d at once (%v), want %d", tc.name, got, why, tc.want)
		}
	}
}

// rolling runs a rolling deployment of a unit of count 3, max_parallel 1,
// over three executors: it returns the most instances down for an update
// at once, once every instance runs v2 (or the wait ran out: ok false).
func rolling(t *testing.T, faults agent.Faults) (most int, ok bool) {
	u := agent.Unit{Name: "web", Count: 3, MaxPerNode: 1}
	f := newFleet(t, fleetOptions{nodes: 3, before: firstRecord(t, u.Name),
		faults: func(int) executor.Faults { return executor.Faults{Agent: faults} }}, u)
	f.waitSettled(30 * time.Second)
	before, err := f.slotKeys(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	for id, ns := range f.rec.versionsOf(u.Name) {
		for n, v := range ns {
			if v != "v1" {
				t.Fatalf("%s on %s started at %q, want v1 (the record's)", id, n, v)
			}
		}
	}
	d := deploy(t, f.c, u.Name, "v2")
	var last string
	ok = consultest.WaitFor(60*time.Second, func() bool {
		r := record(t, f.c, u.Name)
		vs := f.rec.versionsOf(u.Name)
		last = fmt.Sprintf("record %d %s, instances %v", r.N, r.Status, vs)
		if r.N != d.N || r.Status != cluster.DeploySuccessful || len(vs) != u.Count {
			return false
		}
		for _, ns := range vs {
			for _, v := range ns {
				if v != "v2" {
					return false
				}
			}
		}
		return true
	})
	most, why := updating(f.rec.log(), u.Name, rollingBlock.MinHealthyTime)
	t.Logf("most instances updating at once: %d %v", most, why)
	if !ok {
		t.Logf("not rolled out after 60 s: %s", last)
		return most, false
	}
	// The holds did not move: the same sessions, the fencing tokens
	// unchanged, each instance running with its slot key's ModifyIndex.
	after, err := f.slotKeys(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	for k := range u.Count {
		b, a := before[k], after[k]
		if a.ModifyIndex != b.ModifyIndex || a.Session != b.Session {
			t.Errorf("web/%d moved across the update: index %d -> %d, session %s -> %s", k, b.ModifyIndex, a.ModifyIndex, b.Session, a.Session)
		}
		id := agent.SlotID{Unit: u.Name, K: k}
		for n, idx := range f.rec.runningOf(id) {
			if idx != a.ModifyIndex {
				t.Errorf("web/%d on %s runs with token %d, the key's ModifyIndex is %d", k, n, idx, a.ModifyIndex)
			}
			// The child's fenced write with its token, after the update.
			ok, r, _, err := f.c.Txn().Txn(api.TxnOps{
				{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: id.Key(), Index: idx}},
				{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "app/" + id.String(), Value: []byte("x")}},
			}, nil)
			if err != nil || !ok {
				t.Errorf("fenced write of %s with index %d refused after the update: %v %+v", id, idx, err, r)
			}
		}
	}
	updates := 0
	for _, e := range f.rec.log() {
		if e.update && e.start {
			updates++
		}
	}
	if updates != u.Count {
		t.Errorf("%d updates in place, want %d (one a slot)", updates, u.Count)
	}
	// Every status and the judge's move written with its audit record.
	pairs, _, err := f.c.KV().List(cluster.AuditPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]int{}
	for _, p := range pairs {
		var e cluster.AuditEvent
		if json.Unmarshal(p.Value, &e) == nil {
			actions[e.Action]++
		}
	}
	if actions["update"] != u.Count || actions["healthy"] < u.Count || actions["deploy-successful"] != 1 {
		t.Errorf("audit records: %v, want %d update, %d healthy or more, 1 deploy-successful", actions, u.Count, u.Count)
	}
	// The tokens all went back.
	if keys, _, err := f.c.KV().Keys(agent.DeployPrefix(u.Name)+"tokens/", "", nil); err != nil || len(keys) != 0 {
		t.Errorf("tokens left: %v %v", keys, err)
	}
	f.checkNoOverlap()
	return most, true
}

// A rolling deployment of a unit of count 3, max_parallel 1, across three
// executors: the operator writes the record; every instance ends on v2,
// updated in place (same session, same fencing token: the slot key is not
// written), never more than one down at once, and the judge (slot 0's
// holder) moves the record to successful.
func TestRollingDeployment(t *testing.T) {
	most, ok := rolling(t, agent.Faults{})
	if !ok {
		t.Fatal("the deployment did not roll out")
	}
	if most > rollingBlock.MaxParallel {
		t.Errorf("%d instances down for an update at once, max_parallel %d", most, rollingBlock.MaxParallel)
	}
}

// The checker catches holders that update without a rollout token.
func TestCheckerCatchesNoToken(t *testing.T) {
	most, _ := rolling(t, agent.Faults{NoToken: true})
	if most <= rollingBlock.MaxParallel {
		t.Errorf("updates without tokens: at most %d down at once, the checker saw nothing", most)
	}
}

// The judge's move is a compare-and-set on the record it judged: a
// success decided on deployment 2, sent after the operator deployed 3,
// is refused, and the record never goes back to 2; deployment 3 rolls out
// and succeeds.
func TestJudgeMoveRefusedAfterNewDeploy(t *testing.T) {
	testJudgeMove(t, false)
}

func testJudgeMove(t *testing.T, noCAS bool) {
	u := agent.Unit{Name: "web", Count: 3, MaxPerNode: 1}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := newFleet(t, fleetOptions{nodes: 3, before: firstRecord(t, u.Name), faults: func(int) executor.Faults {
		return executor.Faults{NoDeployCAS: noCAS, BeforeMove: func(m agent.MoveDeployment) {
			if m.Next.N == 2 && m.Next.Status == cluster.DeploySuccessful {
				first := false
				once.Do(func() { first = true; close(held) })
				if first {
					<-release
				}
			}
		}}
	}}, u)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	f.waitSettled(30 * time.Second)
	deploy(t, f.c, u.Name, "v2")
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the judge never moved deployment 2 to successful")
	}
	d3 := deploy(t, f.c, u.Name, "v3")
	close(release)
	var last string
	if !consultest.WaitFor(60*time.Second, func() bool {
		r := record(t, f.c, u.Name)
		if r.N < d3.N {
			t.Fatalf("the record went back from %d to %d (%s %s): the judge's move overwrote a newer deploy", d3.N, r.N, r.Version, r.Status)
		}
		vs := f.rec.versionsOf(u.Name)
		last = fmt.Sprintf("record %d %s, instances %v", r.N, r.Status, vs)
		if r.Status != cluster.DeploySuccessful || len(vs) != u.Count {
			return false
		}
		for _, ns := range vs {
			for _, v := range ns {
				if v != "v3" {
					return false
				}
			}
		}
		return true
	}) {
		t.Fatalf("deployment 3 not rolled out after 60 s: %s", last)
	}
	f.checkNoOverlap()
}

// A bad version (its instances never pass their checks) with auto_revert:
// the first slot updated publishes its failure after healthy_deadline,
// the judge writes the revert (the failed deployment's outcome in the
// same record), the failed slot goes back to v1 in place, and the revert
// succeeds; no instance is left on the bad version, and never more than
// max_parallel down at once.
func TestAutoRevert(t *testing.T) {
	u := agent.Unit{Name: "web", Count: 3, MaxPerNode: 1}
	f := newFleet(t, fleetOptions{nodes: 3, before: firstRecord(t, u.Name)}, u)
	f.waitSettled(30 * time.Second)
	before, err := f.slotKeys(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	block := rollingBlock
	block.AutoRevert, block.HealthyDeadline = true, 2*time.Second
	d := deployBlock(t, f.c, u.Name, "v2-bad", block)
	var last string
	if !consultest.WaitFor(60*time.Second, func() bool {
		r := record(t, f.c, u.Name)
		vs := f.rec.versionsOf(u.Name)
		last = fmt.Sprintf("record %d %s %s, instances %v", r.N, r.Version, r.Status, vs)
		if r.N != d.N+1 || r.Status != cluster.DeploySuccessful || len(vs) != u.Count {
			return false
		}
		for _, ns := range vs {
			for _, v := range ns {
				if v != "v1" {
					return false
				}
			}
		}
		return true
	}) {
		t.Fatalf("not reverted after 60 s: %s", last)
	}
	r := record(t, f.c, u.Name)
	if r.Version != "v1" || r.RevertOf != d.N || r.Ended == nil || r.Ended.N != d.N || r.Ended.Status != cluster.DeployFailed {
		t.Errorf("the revert's record: %+v (ended %+v)", r, r.Ended)
	}
	bad := 0
	for _, e := range f.rec.log() {
		if e.update && e.start && e.version == "v2-bad" {
			bad++
		}
	}
	if bad != block.MaxParallel {
		t.Errorf("%d instances went to the bad version, want %d (one batch of max_parallel before the failure)", bad, block.MaxParallel)
	}
	// Its records (website/operations.md): the
	// instance's rollout-failed, then the judge's deploy-failed and
	// deploy-revert in one transaction. Mutation check: the executor
	// without MoveDeployment.Also writes no deploy-revert (fails).
	if a := countActions(f.auditOf(u.Name)); a["rollout-failed"] < 1 || a["deploy-failed"] != 1 || a["deploy-revert"] != 1 || a["unhealthy"] != 0 {
		t.Errorf("audit records %v, want rollout-failed, 1 deploy-failed, 1 deploy-revert", a)
	}
	if most, why := updating(f.rec.log(), u.Name, block.MinHealthyTime); most > block.MaxParallel {
		t.Errorf("%d instances down for an update at once, max_parallel %d: %v", most, block.MaxParallel, why)
	}
	after, err := f.slotKeys(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	for k := range u.Count {
		if after[k].ModifyIndex != before[k].ModifyIndex || after[k].Session != before[k].Session {
			t.Errorf("web/%d moved across the revert: index %d -> %d", k, before[k].ModifyIndex, after[k].ModifyIndex)
		}
	}
	// The holders' records carry their fencing token (term_index), the
	// one their slot key has (never written while held).
	for _, e := range f.auditOf(u.Name) {
		if e.Action != "update" && e.Action != "healthy" && e.Action != "rollout-failed" {
			continue
		}
		k, _ := strconv.Atoi(strings.TrimPrefix(e.Slot, u.Name+"/"))
		if e.TermIndex == 0 || e.TermIndex != after[k].ModifyIndex || e.To == "" {
			t.Errorf("holder's record %+v: want term_index %d and a version", e, after[k].ModifyIndex)
		}
	}
	f.checkNoOverlap()
}
