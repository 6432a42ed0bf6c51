package executor_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
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
// transaction: a fleet settled on a unit of count 2 has a claim record
// for each slot; a graceful stop of a holder adds a release record, with
// the decision it carries out in website/operations.md's words
// ("mariposa stopped", made when the instance was stopped,
// agent.Release.Audit), and the claim of the slot by another node another
// claim record, saying its rank. Mutation checks: without the audit op in
// claimOpsFor, no claim records (the test fails); without it in release,
// no release record; a release that ignores Release.Audit writes
// "released" (fails); a claim without the agent's record says "claimed"
// (fails).
func TestClaimsAndReleasesAudited(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 3}, web)
	f.waitSettled(30 * time.Second)
	if got := countActions(f.auditOf("web")); got["claim"] != web.Count || got["release"] != 0 {
		t.Fatalf("audit records after settling: %v, want %d claim", got, web.Count)
	}
	a := f.holderOf(agent.SlotID{Unit: "web", K: 0})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// As mariposa stops (command's halt, then the release): Halt, the
	// instances stopped, then Stop.
	a.ex.Halt()
	if err := a.ex.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	f.waitSettled(30 * time.Second)
	evs := f.auditOf("web")
	if got := countActions(evs); got["claim"] != web.Count+1 || got["release"] != 1 {
		t.Fatalf("audit records after a graceful stop: %v, want %d claim, 1 release", got, web.Count+1)
	}
	for _, e := range evs {
		if e.Action == "release" && (e.Node != a.name || e.Slot != "web/0" || e.Reason != "mariposa stopped" ||
			e.From != a.name || e.To != cluster.SlotReleased) {
			t.Fatalf("release record %+v, want %s's of web/0, mariposa stopped", e, a.name)
		}
		if e.Action == "claim" && (!rankWords.MatchString(e.Reason) || e.To != e.Node) {
			t.Fatalf("claim record %+v, want its rank, to its node", e)
		}
	}
}

// A hold lost is not the holder's decision (its session destroyed): it
// kills its instance and logs it, and writes no
// record (website/operations.md has none; the node's audit file has the
// instance's slot-lost); the slot's move is the next holder's claim
// record. Mutation check: with "lost" written alone again (agent.Audits),
// the test fails.
func TestLostHoldAudited(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 3}, web)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: "web", K: 0}
	a := f.holderOf(id)
	keys, _ := f.slotKeys("web")
	if _, err := f.c.Session().Destroy(keys[0].Session, nil); err != nil {
		t.Fatal(err)
	}
	if !consultest.WaitFor(30*time.Second, func() bool {
		n := 0
		for _, e := range f.auditOf("web") {
			if e.Action == "claim" && e.Slot == id.String() {
				n++
			}
		}
		return n == 2
	}) {
		t.Fatalf("no second claim of %s: %v", id, countActions(f.auditOf("web")))
	}
	f.waitSettled(30 * time.Second)
	for _, e := range f.auditOf("web") {
		if e.Action != "claim" {
			t.Fatalf("record %+v after %s's hold was lost, want only claims", e, a.name)
		}
	}
}

// rankWords: a claim record's reason (website/operations.md: its rank,
// and a takeover's words).
var rankWords = regexp.MustCompile(`^rank [0-9]+(; takeover from a lost node)?$`)

// A takeover (with the controls: a slot lost with its holder's session) is
// recorded in its claim's transaction, in website/operations.md's words:
// one claim record of the slot by the node that claimed it, "rank N;
// takeover from a lost node", from the lost holder. Mutation check:
// claimOpsFor without the step's records writes "takeover from a lost node"
// alone, without the rank or the lost node (the test fails).
func TestTakeoverAudited(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 3, control: true}, web)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: "web", K: 0}
	// Its holder crashed: a node taking its own lost slot back is no
	// takeover (agent/stopafter.go), so another node must take it.
	a := f.holderOf(id)
	lostHolder := a.name
	// Every node has seen it hold the slot (an idle node hears the index
	// at its pace, and may otherwise miss a hold this short).
	if !consultest.WaitFor(30*time.Second, func() bool {
		for _, n := range f.nodes {
			if !sawHeldBy(n.ex.Stats(), id, lostHolder) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every node saw %s hold %s", lostHolder, id)
	}
	a.ex.Kill()
	f.rec.killNode(a.name)
	keys, _ := f.slotKeys("web")
	if _, err := f.c.Session().Destroy(keys[0].Session, nil); err != nil {
		t.Fatal(err)
	}
	f.waitSettled(30 * time.Second)
	b := f.holderOf(id) // the node that lost it may take it back
	var claim *cluster.AuditEvent
	for _, e := range f.auditOf("web") {
		if e.Action != "claim" {
			t.Fatalf("record %+v, want only claims", e)
		}
		if e.Slot == id.String() && e.Node == b.name && strings.HasSuffix(e.Reason, "; takeover from a lost node") {
			claim = &e
		}
	}
	// The node that lost the slot knows its last holder only as far as
	// its views go: its session's loss leaves a gap in them (the from is
	// then unknown, "").
	from := claim != nil && (claim.From == lostHolder || (b.name == lostHolder && claim.From == ""))
	if claim == nil || !rankWords.MatchString(claim.Reason) || !from || claim.To != b.name {
		t.Fatalf("%s's takeover of %s: claim record %+v, want from %s; %v", b.name, id, claim, lostHolder, countActions(f.auditOf("web")))
	}
}

// sawHeldBy: st shows slot id held by node.
func sawHeldBy(st cluster.FleetStats, id agent.SlotID, node string) bool {
	for _, u := range st.Units {
		if u.Unit != id.Unit {
			continue
		}
		for _, sl := range u.Slots {
			if sl.K == id.K {
				return sl.State == cluster.SlotStatHeld && sl.Node == node
			}
		}
	}
	return false
}
