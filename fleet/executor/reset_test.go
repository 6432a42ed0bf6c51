package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// audits lists the audit records of action.
func (f *fleet) audits(action string) []cluster.AuditEvent {
	return f.auditWhere(func(e cluster.AuditEvent) bool { return e.Action == action })
}

// An instance that failed for good fails its slot on a real agent: its
// holder releases it with the failed mark and the "fail" audit record;
// no node claims it (the others are free to); mariposa reset (ResetSlot,
// with its record) clears the mark and a node claims it again. A reset of
// a slot that has not failed is refused and changes nothing.
func TestFailedSlotHeldUntilReset(t *testing.T) {
	u := agent.Unit{Name: "api", Count: 1, MaxPerNode: 1}
	f := newFleet(t, fleetOptions{nodes: 3, control: true}, u)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: u.Name, K: 0}
	if err := executor.ResetSlot(f.c, u.Name, 0, "tester"); err == nil || !strings.Contains(err.Error(), "has not failed") {
		t.Fatalf("reset of a slot not failed: %v", err)
	}
	h := f.holderOf(id)
	h.ex.InstanceFailed(id, "restarts exhausted")
	key := cluster.FailedKey(u.Name, 0)
	if !consultest.WaitFor(20*time.Second, func() bool {
		p, _, err := f.c.KV().Get(key, nil)
		return err == nil && p != nil
	}) {
		t.Fatal("no failed mark")
	}
	if a := f.audits("fail"); len(a) != 1 || a[0].Slot != id.String() || a[0].Node != h.name {
		t.Fatalf("fail audit records %+v", a)
	}
	// The slot key says failed and why (cluster.SlotValue).
	if p, _, err := f.c.KV().Get(id.Key(), nil); err != nil || p == nil {
		t.Fatalf("slot key: %v, %v", p, err)
	} else if v, err := cluster.DecodeSlotValue(p.Value); err != nil || v.State != cluster.SlotFailed || v.Node != h.name ||
		!strings.Contains(v.Reason, "restarts exhausted") {
		t.Fatalf("slot value %+v (%v), want failed on %s with its reason", v, err, h.name)
	}
	// Nobody claims it: two other nodes, each free to, for well over
	// their ranks' delays and the lock delay.
	// Each change of the slot key wakes the check (a blocking query),
	// until the window ends.
	deadline := time.Now().Add(6 * time.Second)
	var idx uint64
	for wait := time.Until(deadline); wait > 0; wait = time.Until(deadline) {
		p, meta, err := f.c.KV().Get(id.Key(), &api.QueryOptions{WaitIndex: idx, WaitTime: wait})
		if err != nil {
			t.Fatal(err)
		}
		if p != nil && p.Session != "" {
			t.Fatalf("failed slot %s claimed before its reset", id)
		}
		if run := f.rec.runningOf(id); len(run) > 0 {
			t.Fatalf("failed slot %s runs: %v", id, run)
		}
		idx = meta.LastIndex
	}
	if err := executor.ResetSlot(f.c, u.Name, 0, "tester"); err != nil {
		t.Fatal(err)
	}
	if a := f.audits("reset"); len(a) != 1 || a[0].Actor != "tester" || a[0].Slot != id.String() {
		t.Fatalf("reset audit records %+v", a)
	}
	f.waitSettled(30 * time.Second)
	f.checkNoOverlap()
}

// While paused, a node's queue (nodes/<node>/intents, mariposa queue)
// lists the claims the pause holds back, each with the node's place
// ("rank 1 of 1": the other node holds web/0 at max_per_node 1); the
// resume deletes it. The queue is a report, not a decision: no audit
// record (agent.Audits logs it).
func TestQueuePublishedWhilePaused(t *testing.T) {
	u := agent.Unit{Name: "web", Count: 1, MaxPerNode: 1}
	f := newFleet(t, fleetOptions{nodes: 2, control: true}, u)
	f.waitSettled(30 * time.Second)
	seen := f.counts()
	if _, err := cluster.Pause(f.c, "", cluster.PausePlacement, "test", "tester"); err != nil {
		t.Fatal(err)
	}
	f.waitControlSeen(seen)
	f.setUnits(agent.Unit{Name: "web", Count: 2, MaxPerNode: 1})
	var queue []cluster.Intent
	if !consultest.WaitFor(20*time.Second, func() bool {
		q, _, err := cluster.ReadQueue(f.c)
		queue = q
		return err == nil && len(q) > 0
	}) {
		t.Fatal("no queue while paused")
	}
	for _, in := range queue {
		if in.Kind != "claim" || in.Target != "web/1" || in.ID != cluster.IntentID(in.Node, "claim", "web/1") ||
			in.Detail != "rank 1 of 1" {
			t.Fatalf("queue %+v", queue)
		}
	}
	if _, err := cluster.ResumeAll(f.c, "", "tester"); err != nil {
		t.Fatal(err)
	}
	f.waitSettled(30 * time.Second)
	if !consultest.WaitFor(20*time.Second, func() bool {
		pairs, _, err := f.c.KV().List(cluster.Prefix+"nodes/", &api.QueryOptions{})
		for _, p := range pairs {
			if strings.HasSuffix(p.Key, "/intents") {
				return false
			}
		}
		return err == nil
	}) {
		t.Fatal("the queue is still there after the resume")
	}
	if a := f.audits("queue"); len(a) != 0 {
		t.Fatalf("queue audit records %+v", a)
	}
}
