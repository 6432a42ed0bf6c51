package executor_test

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// An instance that fails for good, in a unit with restart.on_exhausted =
// "reschedule", moves on a real agent: its holder A releases the slot with
// its penalty (cluster.PenaltyKey, as cluster.ParsePenalties reads it), the
// slot's history and the "reschedule" audit record in one transaction; node
// B claims it, not before the reschedule delay (3 s) from the failure, and
// its claim deletes the delay's mark in the index. B's instance fails too,
// which exhausts the history (attempts = 1): the slot fails, with B's
// penalty and the history all the same; mariposa reset clears the mark and
// the history, and node C claims it, neither A nor B while their penalties
// run.
func TestRescheduleMovesTheSlot(t *testing.T) {
	u := agent.Unit{Name: "api", Count: 1, MaxPerNode: 1, Reschedule: true, Placement: &schema.Placement{Reschedule: schema.Reschedule{
		Attempts: 1, Interval: time.Hour, Delay: 3 * time.Second, MaxDelay: time.Minute, Penalty: 10 * time.Minute}}}
	f := newFleet(t, fleetOptions{nodes: 3, control: true}, u)
	f.waitSettled(30 * time.Second)
	id := agent.SlotID{Unit: u.Name, K: 0}
	a := f.holderOf(id)
	a.ex.ServiceFailed(id, "api", "3 restarts in 1m")
	var b *node
	if !consultest.WaitFor(30*time.Second, func() bool {
		keys, err := f.slotKeys(u.Name)
		if err != nil || keys[0] == nil || keys[0].Session == "" {
			return false
		}
		n, err := f.nodeOf(keys[0].Session)
		if err != nil || n == a.name {
			return false
		}
		b = f.holderOf(id)
		return len(f.rec.runningOf(id)) > 0
	}) {
		t.Fatalf("slot %s not moved off %s", id, a.name)
	}
	p, _, err := f.c.KV().Get(cluster.PenaltyKey(u.Name, a.name), nil)
	if err != nil || p == nil {
		t.Fatalf("no penalty for %s: %v", a.name, err)
	}
	pen := cluster.ParsePenalties(api.KVPairs{p})
	if until := pen[u.Name][a.name]; until.Before(time.Now().Add(9 * time.Minute)) {
		t.Fatalf("penalty until %v (%s)", until, p.Value)
	}
	hp, _, err := f.c.KV().Get(id.RescheduleHistoryKey(), nil)
	if err != nil || hp == nil {
		t.Fatalf("no history: %v", err)
	}
	h := agent.ParseRescheduleHistory(hp.Value)
	if len(h) != 1 || h[0].Node != a.name || h[0].Reason != "api: 3 restarts in 1m" {
		t.Fatalf("history %s", hp.Value)
	}
	// B's claim (its slot value's since) came after the delay, and took
	// the delay's mark away.
	sp, _, err := f.c.KV().Get(id.Key(), nil)
	if err != nil || sp == nil {
		t.Fatalf("slot key: %v", err)
	}
	if v, _ := cluster.DecodeSlotValue(sp.Value); v.Since.Before(h[0].At.Add(3 * time.Second)) {
		t.Fatalf("claimed by %s at %v, %v after the failure: before the reschedule delay (3s)", v.Node, v.Since, v.Since.Sub(h[0].At))
	}
	if names, _, err := f.c.KV().Keys(agent.IndexPrefix(u.Name), "", nil); err != nil || len(names) != 1 {
		t.Fatalf("the index after the claim: %q, %v (want the holder's entry alone)", names, err)
	}
	if g, _, err := f.c.KV().Get(id.DelayGuardKey(), nil); err != nil || g != nil {
		t.Fatalf("the delay's guard after the claim: %v, %v", g, err)
	}
	if r := f.audits("reschedule"); len(r) != 1 || r[0].Node != a.name || r[0].Slot != id.String() ||
		r[0].From != a.name || r[0].To != cluster.SlotReleased { // website/operations.md
		t.Fatalf("reschedule audit records %+v", r)
	}
	// B fails it too: the slot fails; after the reset C, the one node not
	// penalized, takes it.
	var hist []placement.RescheduleEvent
	b.ex.ServiceFailed(id, "api", "again")
	if !consultest.WaitFor(30*time.Second, func() bool {
		hp, _, err := f.c.KV().Get(id.RescheduleHistoryKey(), nil)
		if err != nil || hp == nil {
			return false
		}
		hist = agent.ParseRescheduleHistory(hp.Value)
		return len(hist) == 2
	}) {
		t.Fatalf("second reschedule not recorded: %+v", hist)
	}
	if hist[1].Node != b.name {
		t.Fatalf("history %+v", hist)
	}
	if !consultest.WaitFor(20*time.Second, func() bool {
		p, _, err := f.c.KV().Get(cluster.FailedKey(u.Name, 0), nil)
		return err == nil && p != nil
	}) {
		t.Fatal("no failed mark once the attempts are exhausted")
	}
	if p, _, err := f.c.KV().Get(cluster.PenaltyKey(u.Name, b.name), nil); err != nil || p == nil {
		t.Fatalf("no penalty for %s: %v", b.name, err)
	}
	if r := f.audits("fail"); len(r) != 1 || r[0].Node != b.name || len(f.audits("reschedule")) != 1 ||
		r[0].From != b.name || r[0].To != cluster.SlotFailed {
		t.Fatalf("fail audit records %+v", r)
	}
	if err := executor.ResetSlot(f.c, u.Name, 0, "tester"); err != nil {
		t.Fatal(err)
	}
	if p, _, err := f.c.KV().Get(id.RescheduleHistoryKey(), nil); err != nil || p != nil {
		t.Fatalf("history kept after the reset: %v %v", p, err)
	}
	f.waitSettled(30 * time.Second)
	if c := f.holderOf(id); c.name == a.name || c.name == b.name {
		t.Fatalf("%s claimed again by %s within its penalty (rescheduled off %s, then %s)", id, c.name, a.name, b.name)
	}
	f.checkNoOverlap()
}
