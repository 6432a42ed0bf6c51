package agent

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
)

// A claim refused because another node took the slot (Taken) must not
// leave the node without a claim time for the slot still free: the ranking
// that sent it to the refused slot (placement.Assign places each node on one
// slot in turn, so with max_per_node 1 it had no place for the others) is
// not reused when the next view only shows fewer free slots. Found by the
// executor's scale test on real Consul (fleet/executor): four nodes, a
// count raised from 1 to 4, one node never claimed the last slot.
func TestTakenClaimRanksAgain(t *testing.T) {
	nodes := []string{"n0", "n1", "n2", "n3"}
	for _, me := range nodes {
		t.Run(me, func(t *testing.T) {
			u := Unit{Name: "web", Count: 4, Exclusive: true, MaxPerNode: 1}
			m := &machine{t: t, a: New(Config{Node: me, Seed: 1}), now: t0}
			m.step(UnitsAnswer{Units: []Unit{u}})
			m.step(SessionCreated{ID: "s-" + me})
			m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: nodes}})
			other := "n3"
			if me == "n3" {
				other = "n0"
			}
			// Slot 0 is held by another node; 1-3 are free. Follow the
			// wakes until this node claims one of them.
			// The wake asked for last stands until another replaces it.
			var wake time.Time
			step := func(in any) []any {
				acts := m.step(in)
				if w, ok := find[Wake](acts); ok {
					wake = w.At
				}
				return acts
			}
			next := func() bool {
				if !wake.After(m.now) {
					return false
				}
				m.now = wake
				return true
			}
			acts := step(slots("web", 10, Slot{K: 0, Node: other, ModifyIndex: 5}))
			var claim Claim
			for range 50 {
				if c, ok := find[Claim](acts); ok {
					claim = c
					break
				}
				if !next() {
					t.Fatalf("neither a claim nor a wake: %v", acts)
				}
				acts = step(Tick{})
			}
			if claim.Slot.Unit == "" {
				t.Fatal("never claimed")
			}
			// Another node took it first.
			m.now = m.now.Add(5 * time.Millisecond)
			step(ClaimDone{Slot: claim.Slot, Taken: true})
			// The newer view: every other node holds one slot; one slot is
			// free, and only this node may hold it.
			var holders []Slot
			free := -1
			rest := []string{}
			for _, n := range nodes {
				if n != me && n != other {
					rest = append(rest, n)
				}
			}
			holders = append(holders, Slot{K: 0, Node: other, ModifyIndex: 5})
			holders = append(holders, Slot{K: claim.Slot.K, Node: rest[0], ModifyIndex: 11})
			for k := 1; k < 4; k++ {
				if k == claim.Slot.K {
					continue
				}
				if len(rest) > 1 {
					holders = append(holders, Slot{K: k, Node: rest[1], ModifyIndex: 12})
					rest = rest[:1]
					continue
				}
				free = k
			}
			m.now = m.now.Add(50 * time.Millisecond)
			acts = step(slots("web", 12, holders...))
			want := SlotID{"web", free}
			for range 50 {
				if c, ok := find[Claim](acts); ok {
					if c.Slot != want {
						t.Fatalf("claimed %v, want %v", c.Slot, want)
					}
					return
				}
				if !next() {
					t.Fatalf("%s: after its claim of %v was refused, no claim of %v and no wake for one: %v", me, claim.Slot, want, acts)
				}
				acts = step(Tick{})
			}
			t.Fatalf("%v never claimed", want)
		})
	}
}

// A node that was draining when a slot fell vacant (so not among the
// nodes ranked for it) claims it once its drain is undone: the ranking
// made without it is not kept as if only the free slots had shrunk.
// Found by TestFleetVolumeStopHandsOff (e2e): the
// slot came back to no node, and its data stayed unserved.
func TestUndrainedNodeClaimsAgain(t *testing.T) {
	u := Unit{Name: "notes", Count: 1, Exclusive: true, MaxPerNode: 1}
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Control: true})}
	m.step(UnitsAnswer{Units: []Unit{u}})
	m.step(SessionCreated{ID: "s-me"})
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me", "other"}}})
	drain := cluster.Control{Drains: map[string]cluster.DrainRecord{"me": {Node: "me", Deadline: t0.Add(time.Hour)}}}
	m.step(ControlAnswer{View: &ControlView{Index: 2, Control: drain}})
	acts := m.step(slots("notes", 10, Slot{K: 0, Released: true}))
	for range 10 {
		if c, ok := find[Claim](acts); ok {
			t.Fatalf("claimed while draining: %+v", c)
		}
		w, ok := find[Wake](acts)
		if !ok || w.At.After(t0.Add(time.Minute)) {
			break
		}
		m.now = w.At
		acts = m.step(Tick{})
	}
	// The drain undone; the slot still free as the same view says
	// (another node claimed and released it meanwhile: the index's keys
	// are the same, so no newer answer comes).
	m.now = m.now.Add(100 * time.Millisecond)
	claimsIn(m, m.step(ControlAnswer{View: &ControlView{Index: 3}}), SlotID{"notes", 0}, "after the undo")
}

// claimsIn follows acts' wakes (at most 20) until the agent claims id,
// and fails the test when it claims another slot or stops waking.
func claimsIn(m *machine, acts []any, id SlotID, when string) {
	m.t.Helper()
	for range 20 {
		if c, ok := find[Claim](acts); ok {
			if c.Slot != id {
				m.t.Fatalf("claim %+v, want %s", c, id)
			}
			return
		}
		w, ok := find[Wake](acts)
		if !ok {
			m.t.Fatalf("no claim and no wake %s: %+v", when, acts)
		}
		m.now = w.At
		acts = m.step(Tick{})
	}
	m.t.Fatalf("no claim %s", when)
}

// A node back among the live (its checks passing again after a freeze)
// ranks the free slots it saw while it was not: the slot's view was
// answered while this node was failing, and no other answer comes.
// Mutation check: without NodesAnswer's dirtyAll on the node's return,
// no claim and no wake (TestFleetVolumeStopCutShort stalled so in CI).
func TestNodeBackAmongLiveClaims(t *testing.T) {
	u := Unit{Name: "notes", Count: 1, Exclusive: true, MaxPerNode: 1}
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Control: true})}
	m.step(UnitsAnswer{Units: []Unit{u}})
	m.step(SessionCreated{ID: "s-me"})
	m.step(ControlAnswer{View: &ControlView{Index: 2}})
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"other"}, Failing: []string{"me"}}})
	acts := m.step(slots("notes", 10, Slot{K: 0, Released: true}))
	if c, ok := find[Claim](acts); ok {
		t.Fatalf("claimed while failing: %+v", c)
	}
	m.now = m.now.Add(time.Second)
	claimsIn(m, m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me", "other"}}}), SlotID{"notes", 0}, "once back among the live")
}
