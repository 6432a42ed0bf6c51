package executor_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// waitControlSeen waits until every node's watch on control/ has answered
// a change made after counts were taken: its next ask comes after the
// loop got the answer (the inbox keeps the order, so what the test posts
// next is stepped after it).
func (f *fleet) waitControlSeen(before []map[string]int) {
	f.t.Helper()
	if !consultest.WaitFor(20*time.Second, func() bool {
		for i, n := range f.nodes {
			if n.proxy.counts()["control"] <= before[i]["control"] {
				return false
			}
		}
		return true
	}) {
		f.t.Fatal("a node's watch on control/ did not answer the change")
	}
}

func (f *fleet) counts() []map[string]int {
	out := make([]map[string]int, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.proxy.counts()
	}
	return out
}

// A pause written to control/ stops new claims: a unit scaled up while
// paused stays short (what runs keeps running), and fills once resumed.
func TestPauseStopsNewClaims(t *testing.T) {
	u := agent.Unit{Name: "web", Count: 2, MaxPerNode: 1}
	f := newFleet(t, fleetOptions{nodes: 3, control: true}, u)
	f.waitSettled(30 * time.Second)
	before, err := f.slotKeys(u.Name)
	if err != nil {
		t.Fatal(err)
	}
	seen := f.counts()
	if _, err := cluster.Pause(f.c, u.Name, cluster.PausePlacement, "test", "tester"); err != nil {
		t.Fatal(err)
	}
	f.waitControlSeen(seen)
	up := u
	up.Count = 3
	f.setUnits(up)
	// Paused: web/2 is not claimed (three rank steps and a lock delay are
	// far less than this), web/0 and web/1 keep their holds.
	third := agent.SlotID{Unit: u.Name, K: 2}
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		keys, err := f.slotKeys(u.Name)
		if err != nil {
			t.Fatal(err)
		}
		if p := keys[2]; p != nil && p.Session != "" {
			t.Fatalf("%s claimed while its unit is paused", third)
		}
		if run := f.rec.runningOf(third); len(run) > 0 {
			t.Fatalf("%s runs while its unit is paused: %v", third, run)
		}
		for k := range u.Count {
			if keys[k] == nil || keys[k].ModifyIndex != before[k].ModifyIndex || keys[k].Session != before[k].Session {
				t.Fatalf("web/%d moved while paused: %+v", k, keys[k])
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	lifted, err := cluster.ResumeAll(f.c, u.Name, "tester")
	if err != nil || len(lifted.Pauses) != 1 {
		t.Fatalf("resume: %+v %v", lifted, err)
	}
	f.waitSettled(30 * time.Second)
	f.checkNoOverlap()
	// A new unit's slots and the one the count added were never claimed:
	// no takeover, nothing spent of the budget (each counted as a lost
	// node of its own before: one slot filled per window).
	if p, _, err := f.c.KV().Get(cluster.TakeoversKey, nil); err != nil || p != nil {
		t.Fatalf("the takeover budget was spent by claims of slots never claimed: %v %v", p, err)
	}
}

// A drain: the draining node gives its slots away, claims nothing, and its
// status says done only once Consul shows it holding nothing and no
// instance of it runs.
func TestDrainDoneOnlyWhenEmpty(t *testing.T) {
	u := agent.Unit{Name: "web", Count: 2, MaxPerNode: 1}
	f := newFleet(t, fleetOptions{nodes: 3, control: true}, u)
	f.waitSettled(30 * time.Second)
	d := f.holderOf(agent.SlotID{Unit: u.Name, K: 0})
	if _, err := cluster.StartDrain(f.c, d.name, 5*time.Minute, false, "tester"); err != nil {
		t.Fatal(err)
	}
	// Every status the node publishes, as it is written: one that says
	// done must find the node holding nothing.
	var last agent.DrainStatus
	var idx uint64
	done := consultest.WaitFor(60*time.Second, func() bool {
		p, meta, err := f.c.KV().Get(agent.DrainStatusKey(d.name), nil)
		if err != nil || p == nil || meta.LastIndex == idx {
			return false
		}
		idx = meta.LastIndex
		if err := json.Unmarshal(p.Value, &last); err != nil {
			t.Fatalf("drain status: %v", err)
		}
		if !last.Done {
			return false
		}
		keys, err := f.slotKeys(u.Name)
		if err != nil {
			t.Fatal(err)
		}
		for k, p := range keys {
			if p.Session == "" {
				continue
			}
			if n, err := f.nodeOf(p.Session); err == nil && n == d.name {
				t.Fatalf("drain of %s says done while it holds web/%d", d.name, k)
			}
		}
		for k := range u.Count + 1 {
			if _, ok := f.rec.runningOf(agent.SlotID{Unit: u.Name, K: k})[d.name]; ok {
				t.Fatalf("drain of %s says done while web/%d runs there", d.name, k)
			}
		}
		return true
	})
	if !done {
		t.Fatalf("drain of %s not done after 60 s: last status %+v", d.name, last)
	}
	f.waitSettled(30 * time.Second)
	f.checkNoOverlap()
	// The drain's decisions are recorded in their transactions, in
	// website/operations.md's vocabulary: web/0's
	// release is a "release" record, drained node -> released, saying
	// "drained from"; no "drain" record of a slot, and the statuses
	// (reports, not decisions) none. Mutation checks: release without
	// the step's records, or the agent's old "drain" action, fails it.
	released := false
	for _, e := range f.auditOf(u.Name) {
		if e.Action == "release" && e.Node == d.name && e.Slot == "web/0" && strings.Contains(e.Reason, "drained from "+d.name+": released;") &&
			e.From == d.name && e.To == cluster.SlotReleased {
			released = true
		}
	}
	n := countActions(f.auditOf(u.Name))["drain"] + countActions(f.auditOf(""))["drain-status"]
	if !released || n != 0 {
		t.Fatalf("drain records: web/0's release %v, %d drain or drain-status; %v %v", released, n, countActions(f.auditOf(u.Name)), countActions(f.auditOf("")))
	}
}

// A pause written just before a deploy holds the deploy's new slot, though
// the node's control watch has not answered it yet (it lags: Faults.
// ControlStale keeps its first answer): the units change waits for a read
// of control/ of its own (fresh.go). Found by e2e's TestFleetPause
// (`pause -scope placement`, then `deploy` with a count raised). Mutation
// check: with Faults.NoFreshRead the slot is claimed (the mutant row
// expects it).
func TestPauseJustBeforeDeployHolds(t *testing.T) {
	for _, mutant := range []bool{false, true} {
		t.Run(map[bool]string{false: "fresh", true: "mutant"}[mutant], func(t *testing.T) {
			u := agent.Unit{Name: "web", Count: 1, MaxPerNode: 1}
			f := newFleet(t, fleetOptions{nodes: 2, control: true, faults: func(int) executor.Faults {
				return executor.Faults{ControlStale: true, NoFreshRead: mutant}
			}}, u)
			f.waitSettled(30 * time.Second)
			if _, err := cluster.Pause(f.c, u.Name, cluster.PausePlacement, "test", "tester"); err != nil {
				t.Fatal(err)
			}
			up := u
			up.Count = 2
			f.setUnits(up)
			second := agent.SlotID{Unit: u.Name, K: 1}
			claimed := consultest.WaitFor(4*time.Second, func() bool {
				keys, err := f.slotKeys(u.Name)
				return err == nil && keys[1] != nil && keys[1].Session != ""
			})
			if claimed != mutant {
				t.Fatalf("%s claimed: %v, want %v (paused before the count was raised)", second, claimed, mutant)
			}
		})
	}
}
