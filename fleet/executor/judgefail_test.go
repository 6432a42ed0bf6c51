package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A slot that fails for good fails the running deployment of its unit
// on a real agent (CLUSTER.md section 5): a unit of count 1 (no other holder
// to judge: the node that failed the slot does), its instance at the new
// version failed while min_healthy_time (a minute) still runs; the record
// moves to failed with the failed slot's reason and its "deploy-failed"
// audit record.
//
// Mutation-checked: without the failed-slot rule (fleet/agent.JudgeUnit)
// the record stays running.
func TestFailedSlotFailsDeployment(t *testing.T) {
	u := agent.Unit{Name: "api", Count: 1, MaxPerNode: 1}
	f := newFleet(t, fleetOptions{nodes: 2, control: true, before: firstRecord(t, u.Name)}, u)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: u.Name, K: 0}
	block := rollingBlock
	block.MinHealthyTime = time.Minute
	d := deployBlock(t, f.c, u.Name, "v2", block)
	if !consultest.WaitFor(30*time.Second, func() bool {
		for _, v := range f.rec.versionsOf(u.Name)[id] {
			if v == "v2" {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s never ran v2: %v", id, f.rec.versionsOf(u.Name))
	}
	f.holderOf(id).ex.ServiceFailed(id, "api", "3 restarts in 1m")
	var r agent.Deployment
	if !consultest.WaitFor(30*time.Second, func() bool {
		r = record(t, f.c, u.Name)
		return r.Status != cluster.DeployRunning
	}) {
		t.Fatalf("deployment %d still running after its slot failed: %+v", d.N, r)
	}
	if r.N != d.N || r.Status != cluster.DeployFailed || !strings.Contains(r.Reason, "slot api/0 failed: 3 restarts in 1m") {
		t.Fatalf("record %+v, want deployment %d failed by slot api/0", r, d.N)
	}
	if a := f.audits("deploy-failed"); len(a) != 1 || !strings.Contains(a[0].Reason, "slot api/0 failed") {
		t.Fatalf("deploy-failed records %+v", a)
	}
}

// progress_deadline on a real agent: a unit of count 3 on two nodes (one
// instance a node: slot 2 has no node) deploys v2; the two placed slots
// become healthy at v2, then nothing progresses: the judge (slot 0's
// holder, woken by its own timer) fails the deployment after
// progress_deadline plus the 2 s skew margin, instead of leaving it running
// until a deploy -force.
//
// Mutation-checked: without the progress_deadline rule the record stays
// running.
func TestProgressDeadlineFailsDeployment(t *testing.T) {
	u := agent.Unit{Name: "web", Count: 3, MaxPerNode: 1}
	f := newFleet(t, fleetOptions{nodes: 2, control: true, before: firstRecord(t, u.Name)}, u)
	id := agent.SlotID{Unit: u.Name, K: 0}
	if !consultest.WaitFor(30*time.Second, func() bool { return len(f.rec.runningOf(id)) > 0 }) {
		t.Fatal("slot 0 never ran")
	}
	block := rollingBlock
	block.ProgressDeadline = 2 * time.Second
	d := deployBlock(t, f.c, u.Name, "v2", block)
	var r agent.Deployment
	if !consultest.WaitFor(60*time.Second, func() bool {
		r = record(t, f.c, u.Name)
		return r.Status != cluster.DeployRunning
	}) {
		t.Fatalf("deployment %d still running with a slot no node can hold: %+v", d.N, r)
	}
	if r.N != d.N || r.Status != cluster.DeployFailed ||
		r.Reason != "no progress within progress_deadline (2s): 2 of 3 instances of web healthy" {
		t.Fatalf("record %+v, want deployment %d failed on progress_deadline with 2 of 3 healthy", r, d.N)
	}
	if a := f.audits("deploy-failed"); len(a) != 1 || !strings.Contains(a[0].Reason, "progress_deadline") {
		t.Fatalf("deploy-failed records %+v", a)
	}
}
