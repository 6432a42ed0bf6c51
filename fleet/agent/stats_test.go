package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
)

// The metrics' snapshot from the agent's state, with cluster.FleetStats'
// meaning (cluster/stats.go): a slot this node holds (Mine, its fencing token), one another
// node holds, one freed by an invalidation (lost, counted free too), a
// failed one (its mark in control/), a free one this node plans a claim
// for (VacantSince), the live nodes, the brake, the pauses and the queue.
// Mutation checks: counting a lost slot as held, or Mine without the
// hold, fails the table.
func TestStatsSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slots []Slot
		ctl   cluster.Control
		want  cluster.UnitStats
		ready bool
		brake bool
		held  int // HeldBack
	}{
		{name: "before any answer of the unit: its holds only", ready: false,
			want: cluster.UnitStats{Unit: "db", Desired: 4, Held: 1, Free: 3}},
		{name: "mine, another's, lost, free", ready: true,
			slots: []Slot{{K: 0, Node: "me", ModifyIndex: 41}, {K: 1, Node: "x", ModifyIndex: 41}, {K: 2, ModifyIndex: 39}},
			want:  cluster.UnitStats{Unit: "db", Desired: 4, Held: 2, Free: 2, Lost: 1}},
		{name: "released slots are free, not lost", ready: true,
			slots: []Slot{{K: 0, Node: "me", ModifyIndex: 41}, {K: 2, ModifyIndex: 39, Released: true}},
			want:  cluster.UnitStats{Unit: "db", Desired: 4, Held: 1, Free: 3}},
		{name: "failed and the brake", ready: true, brake: true,
			slots: []Slot{{K: 0, Node: "me", ModifyIndex: 41}},
			ctl:   cluster.Control{Storm: &cluster.StormRecord{At: t0}, Failed: map[string]cluster.FailedRecord{"db/3": {Node: "x", Reason: "r", At: t0}}},
			want:  cluster.UnitStats{Unit: "db", Desired: 4, Held: 1, Free: 2, Failed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(Config{Node: "me", Seed: 1, Control: true, Warm: &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{"db", 0}: 40}}})
			now := t0
			a.Step(now, UnitsAnswer{Units: []Unit{{Name: "db", Count: 4, MaxPerNode: 4}}})
			a.Step(now, ctlView(10, tc.ctl))
			a.Step(now, NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me", "x", "y"}, Failing: []string{"z"}}})
			if tc.slots != nil {
				a.Step(now, slots("db", 41, tc.slots...))
			}
			now = now.Add(10 * time.Millisecond)
			st := a.Stats(now)
			if st.Node != "me" || st.Ready != tc.ready || st.LiveNodes != 3 || st.StormBrake != tc.brake || st.HeldBack != tc.held {
				t.Fatalf("stats %+v", st)
			}
			if len(st.Units) != 1 {
				t.Fatalf("units %+v", st.Units)
			}
			u := st.Units[0]
			if u.Unit != tc.want.Unit || u.Desired != tc.want.Desired || u.Held != tc.want.Held || u.Free != tc.want.Free ||
				u.Failed != tc.want.Failed || u.Lost != tc.want.Lost || len(u.Slots) != 4 {
				t.Fatalf("unit %+v, want %+v", u, tc.want)
			}
			for _, s := range u.Slots {
				mine := s.K == 0
				if s.Mine != mine || (mine && (s.TermIndex != 40 || s.State != cluster.SlotStatHeld || s.Node != "me")) {
					t.Fatalf("slot %+v: mine %v", s, mine)
				}
				if (s.State == cluster.SlotStatHeld || s.State == cluster.SlotStatFailed) && !s.VacantSince.IsZero() {
					t.Fatalf("slot %+v: vacant since", s)
				}
			}
		})
	}
}

// A paused unit's claim held back is in the queue (HeldBack) and the
// pause in Pauses; Waiting says why each free slot waits. Mutation check:
// Mine for a hold whose claim is on its way fails it.
func TestStatsPausedAndWaiting(t *testing.T) {
	a := New(Config{Node: "me", Seed: 1, Control: true})
	a.Step(t0, UnitsAnswer{Units: []Unit{{Name: "db", Count: 2, MaxPerNode: 2}, {Name: "web", Count: 1, MaxPerNode: 1}}})
	a.Step(t0, SessionCreated{ID: "s-me"})
	a.Step(t0, ctlView(10, pause("db", cluster.PausePlacement)))
	a.Step(t0, NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me"}}})
	a.Step(t0, slots("db", 5))
	acts := a.Step(t0, slots("web", 5))
	if _, ok := find[Claim](acts); ok {
		t.Fatalf("claimed before its rank's time: %v", acts)
	}
	w := a.Waiting(t0)
	if len(w) != 3 || !strings.HasPrefix(w[2], "slot web/0 free; rank 1, claiming in ") {
		t.Fatalf("waiting %q", w)
	}
	later := t0.Add(time.Second) // past every claim time
	if c, ok := find[Claim](a.Step(later, Tick{})); !ok || c.Slot != (SlotID{"web", 0}) {
		t.Fatalf("claim %+v %v, want web/0's", c, ok)
	}
	st := a.Stats(later)
	if len(st.Pauses) != 1 || st.Pauses[0].Unit != "db" || st.HeldBack != 2 {
		t.Fatalf("pauses %+v held back %d, want db's 2 claims", st.Pauses, st.HeldBack)
	}
	w = a.Waiting(later)
	if len(w) != 2 || !strings.Contains(w[0], "slot db/0 free; rank 1, held back: ") || !strings.Contains(w[1], "db/1") {
		t.Fatalf("waiting %q", w)
	}
	if st.Units[0].Unit != "db" || st.Units[0].Slots[0].VacantSince != t0 || st.Units[0].Slots[1].VacantSince != t0 {
		t.Fatalf("vacant since: %+v", st.Units)
	}
	// web/0's claim is on its way: not held yet (a hold counts once its
	// claim is applied), and not waited for.
	if web := st.Units[1]; web.Held != 0 || web.Slots[0].Mine {
		t.Fatalf("a claim on its way counted held: %+v", web)
	}
}
