package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

func TestStorm(t *testing.T) {
	for _, tc := range []struct {
		vanished, base int
		want           bool
	}{
		{0, 0, false},
		{1, 1, false}, // a one-node fleet losing its node: a node loss
		{1, 2, false},
		{2, 3, true},
		{2, 4, false}, // half is not more than half
		{3, 5, true},
		{5, 10, false},
		{6, 10, true},
		{51, 100, true},
	} {
		if got := Storm(tc.vanished, tc.base); got != tc.want {
			t.Errorf("Storm(%d, %d) = %v, want %v", tc.vanished, tc.base, got, tc.want)
		}
	}
}

func TestTakeoverBudget(t *testing.T) {
	for in, want := range map[int]int{0: 1, 1: 1, 5: 1, 10: 1, 11: 2, 100: 10, 101: 11} {
		if got := TakeoverBudget(in); got != want {
			t.Errorf("TakeoverBudget(%d) = %d, want %d", in, got, want)
		}
	}
}

// TestVanishTracker: a sequence of reads of the supervisors, and what
// counts as vanished after each.
func TestVanishTracker(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	live := func(names ...string) []placement.NodeInfo {
		var out []placement.NodeInfo
		for _, n := range names {
			out = append(out, placement.NodeInfo{Name: n, Live: true})
		}
		return out
	}
	dead := func(nodes []placement.NodeInfo, names ...string) []placement.NodeInfo {
		out := slices.Clone(nodes)
		for i := range out {
			if slices.Contains(names, out[i].Name) {
				out[i].Live = false
			}
		}
		return out
	}
	all := live("a", "b", "c", "d", "e")
	var tr vanishTracker
	for _, st := range []struct {
		name     string
		at       time.Duration
		nodes    []placement.NodeInfo
		forget   bool
		vanished []string
		base     int
	}{
		{name: "first read", nodes: all, base: 5},
		{name: "already dead at the first read would not count", at: time.Second, nodes: all, base: 5},
		{name: "two go critical", at: 2 * time.Second, nodes: dead(all, "a", "b"), vanished: []string{"a", "b"}, base: 5},
		{name: "read again: no change", at: 3 * time.Second, nodes: dead(all, "a", "b"), vanished: []string{"a", "b"}, base: 5},
		{name: "a third: a storm", at: 10 * time.Second, nodes: dead(all, "a", "b", "c"), vanished: []string{"a", "b", "c"}, base: 5},
		{name: "one comes back", at: 20 * time.Second, nodes: dead(all, "a", "b"), vanished: []string{"a", "b"}, base: 5},
		{name: "out of the window", at: 63 * time.Second, nodes: dead(all, "a", "b"), base: 3},
		{name: "a graceful stop deregisters: not a vanishing", at: 64 * time.Second, nodes: live("c", "d"), base: 2},
		{name: "a new node", at: 65 * time.Second, nodes: live("c", "d", "f"), base: 3},
		{name: "resume forgets", at: 66 * time.Second, nodes: dead(live("c", "d", "f"), "c", "d"), forget: true, base: 1},
		{name: "only new vanishings count after", at: 67 * time.Second, nodes: dead(live("c", "d", "f"), "c", "d", "f"), vanished: []string{"f"}, base: 1},
	} {
		if st.forget {
			tr.observe(st.nodes, t0.Add(st.at))
			tr.forget()
		}
		v, base := tr.observe(st.nodes, t0.Add(st.at))
		if !slices.Equal(v, st.vanished) || base != st.base {
			t.Fatalf("%s: vanished %v of %d, want %v of %d", st.name, v, base, st.vanished, st.base)
		}
	}
}

// TestVanishTrackerLifted: a node that saw the supervisors live, then
// the lifted record of a resume it never saw the brake of, and only then
// the supervisors down: those the record names are no vanishings; one it
// does not name is, and one named that comes back and goes again is.
func TestVanishTrackerLifted(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	nodes := func(down ...string) []placement.NodeInfo {
		var out []placement.NodeInfo
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			out = append(out, placement.NodeInfo{Name: n, Live: !slices.Contains(down, n)})
		}
		return out
	}
	var tr vanishTracker
	tr.observe(nodes(), t0)
	tr.lifted([]string{"a", "b", "c", "x"})
	for _, st := range []struct {
		at       time.Duration
		down     []string
		vanished []string
	}{
		{time.Second, []string{"a", "b", "c"}, nil},
		{2 * time.Second, []string{"a", "b", "c", "d"}, []string{"d"}},
		{3 * time.Second, []string{"b", "c", "d"}, []string{"d"}},           // a comes back
		{4 * time.Second, []string{"a", "b", "c", "d"}, []string{"a", "d"}}, // and goes again
	} {
		if v, _ := tr.observe(nodes(st.down...), t0.Add(st.at)); !slices.Equal(v, st.vanished) {
			t.Fatalf("at %v, down %v: vanished %v, want %v", st.at, st.down, v, st.vanished)
		}
	}
}

func TestLiftedDown(t *testing.T) {
	r := &StormRecord{Vanished: []string{"c", "a"}}
	got := LiftedDown(r, []placement.NodeInfo{{Name: "a"}, {Name: "b"}, {Name: "d", Live: true}, {Name: "e"}})
	if !slices.Equal(got, []string{"a", "b", "c", "e"}) {
		t.Fatalf("LiftedDown = %v", got)
	}
	if got := LiftedDown(nil, []placement.NodeInfo{{Name: "b"}, {Name: "d", Live: true}}); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("LiftedDown of a corrupt record = %v", got)
	}
}

func TestTakeoverLog(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	l := TakeoverLog{Takeovers: []Takeover{
		{Slot: "api/0", From: "old", At: t0.Add(-20 * time.Second)}, // out of the window
		{Slot: "api/1", From: "n1", At: t0.Add(-3 * time.Second)},
		{Slot: "web/1", From: "n1", At: t0.Add(-2 * time.Second)},
		{Slot: "api/2", From: "n2", At: t0.Add(-1 * time.Second)},
	}}
	for _, tc := range []struct {
		from   string
		budget int
		ok     bool
	}{
		{"n1", 1, true}, // n1's slots are already moving: the rest of them go too
		{"n2", 1, true},
		{"n3", 1, false},
		{"n3", 2, false},
		{"n3", 3, true},
		{"old", 2, false},
	} {
		ok, oldest := l.allows(tc.from, t0, tc.budget)
		if ok != tc.ok || !oldest.Equal(t0.Add(-3*time.Second)) {
			t.Errorf("allows(%s, budget %d) = %v, %v; want %v", tc.from, tc.budget, ok, oldest, tc.ok)
		}
	}
	l2 := l.with(Takeover{Slot: "api/3", From: "n3", At: t0})
	if len(l2.Takeovers) != 4 || l2.Takeovers[0].Slot != "api/1" || l2.Takeovers[3].Slot != "api/3" {
		t.Fatalf("with: %+v", l2)
	}
	if len(l.Takeovers) != 4 || l.Takeovers[0].Slot != "api/0" {
		t.Fatal("with changed the log it was called on")
	}
	if _, err := DecodeTakeoverLog([]byte("{")); err == nil {
		t.Error("a corrupt log decoded")
	}
}

func TestDecodeStormRecord(t *testing.T) {
	if _, err := DecodeStormRecord([]byte(`{"node":"n1"}`)); err == nil {
		t.Error("a record without a time decoded")
	}
	if _, err := DecodeStormRecord([]byte(`[1]`)); err == nil {
		t.Error("an array decoded")
	}
	r, err := DecodeStormRecord([]byte(`{"at":"2026-11-23T10:00:00Z","node":"n1","vanished":["n2","n3"],"base":4}`))
	if err != nil || r.Reason() != "2 of 4 supervisors vanished within 1m0s" {
		t.Fatalf("%+v %v", r, err)
	}
}
