package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// auditOf is the audit records of unit (and of no slot, unit "").
func (f *fleet) auditOf(unit string) []cluster.AuditEvent {
	return f.auditWhere(func(e cluster.AuditEvent) bool { return e.Service == unit })
}

// auditWhere lists the audit records that keep says to keep.
func (f *fleet) auditWhere(keep func(cluster.AuditEvent) bool) []cluster.AuditEvent {
	f.t.Helper()
	pairs, _, err := f.c.KV().List(cluster.AuditPrefix, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []cluster.AuditEvent
	for _, p := range pairs {
		var e cluster.AuditEvent
		if json.Unmarshal(p.Value, &e) == nil && keep(e) {
			out = append(out, e)
		}
	}
	return out
}

func countActions(evs []cluster.AuditEvent) map[string]int {
	out := map[string]int{}
	for _, e := range evs {
		out[e.Action]++
	}
	return out
}

// Every claim and every release is written with its audit record, in its
// transaction (as cluster.Fleet's are): a fleet settled on a unit of count
// 2 has a claim record for each slot; a graceful stop of a holder adds a
// release record, with the decision it carries out (the unit gone from
// the node: "scaled down", made when the instance was stopped,
// agent.Release.Audit), and the claim of the slot by another node another
// claim record. Mutation checks: without the audit op in claimOpsFor, no
// claim records (the test fails); without it in release, no release
// record; a release that ignores Release.Audit writes "released" (fails).
func TestClaimsAndReleasesAudited(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 3}, web)
	f.waitSettled(30 * time.Second)
	if got := countActions(f.auditOf("web")); got["claim"] != web.Count || got["release"] != 0 {
		t.Fatalf("audit records after settling: %v, want %d claim", got, web.Count)
	}
	a := f.holderOf(agent.SlotID{Unit: "web", K: 0})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.ex.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	f.waitSettled(30 * time.Second)
	evs := f.auditOf("web")
	if got := countActions(evs); got["claim"] != web.Count+1 || got["release"] != 1 {
		t.Fatalf("audit records after a graceful stop: %v, want %d claim, 1 release", got, web.Count+1)
	}
	for _, e := range evs {
		if e.Action == "release" && (e.Node != a.name || e.Slot != "web/0" || e.Reason != "scaled down") {
			t.Fatalf("release record %+v, want %s's of web/0, scaled down", e, a.name)
		}
	}
}

// A decision with no transaction of its own is written alone
// (agent.Audits): a holder whose session is destroyed kills its instance
// (the hold is lost) and writes the "lost" record. Mutation check:
// without the executor's writeAudits of the alone records, no "lost"
// record (the test fails).
func TestLostHoldAudited(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 3}, web)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: "web", K: 0}
	a := f.holderOf(id)
	keys, _ := f.slotKeys("web")
	if _, err := f.c.Session().Destroy(keys[0].Session, nil); err != nil {
		t.Fatal(err)
	}
	var lost cluster.AuditEvent
	if !consultest.WaitFor(30*time.Second, func() bool {
		for _, e := range f.auditOf("web") {
			if e.Action == "lost" && e.Slot == id.String() {
				lost = e
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no lost record of %s: %v", id, countActions(f.auditOf("web")))
	}
	if lost.Node != a.name || lost.Reason == "" {
		t.Fatalf("lost record %+v, want %s's with its reason", lost, a.name)
	}
	f.waitSettled(30 * time.Second)
}

// A takeover (with the controls: a slot lost with its holder's session)
// is recorded in its claim's transaction: the "takeover" record of the
// slot by the node that claimed it, beside its claim record. Mutation
// check: claimOpsFor without the step's records writes no takeover
// record (the test fails).
func TestTakeoverAudited(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 3, control: true}, web)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: "web", K: 0}
	// Its holder crashed: a node taking its own lost slot back is no
	// takeover (agent/stopafter.go), so another node must take it.
	a := f.holderOf(id)
	a.ex.Kill()
	f.rec.killNode(a.name)
	keys, _ := f.slotKeys("web")
	if _, err := f.c.Session().Destroy(keys[0].Session, nil); err != nil {
		t.Fatal(err)
	}
	f.waitSettled(30 * time.Second)
	b := f.holderOf(id)
	var takeover, claim bool
	for _, e := range f.auditOf("web") {
		if e.Slot == id.String() && e.Node == b.name {
			takeover = takeover || e.Action == "takeover"
			claim = claim || (e.Action == "claim" && e.Reason == "a takeover")
		}
	}
	if !takeover || !claim {
		t.Fatalf("%s's takeover of %s: takeover record %v, claim record %v; %v", b.name, id, takeover, claim, countActions(f.auditOf("web")))
	}
}
