package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

func TestHRW(t *testing.T) {
	// Pinned: every node, every release and architecture must agree (checked
	// against an independent implementation of FNV-1a + splitmix64).
	for _, c := range []struct {
		unit string
		slot int
		node string
		want uint64
	}{
		{"api", 0, "web-1", 0x6ef24a89dfef8f2e},
		{"api", 1, "web-1", 0xc6ee65e05e46fd36},
		{"", 0, "", 0x3ea04d46a5ed6ae1},
	} {
		if got := HRW(c.unit, c.slot, c.node); got != c.want {
			t.Errorf("HRW(%q, %d, %q) = %#x, want %#x", c.unit, c.slot, c.node, got, c.want)
		}
	}
	// The separators keep ("ab", "c") and ("a", "bc") apart.
	if HRW("a", 1, "bc") == HRW("ab", 1, "c") {
		t.Error("HRW does not separate its fields")
	}
	// Rendezvous spreads slots evenly: with 10 similar names and 5,000
	// slots, every node wins about 500.
	wins := map[string]int{}
	for k := range 5000 {
		best, bestH := "", uint64(0)
		for i := range 10 {
			n := fmt.Sprintf("web-%d", i)
			if h := HRW("api", k, n); best == "" || h > bestH {
				best, bestH = n, h
			}
		}
		wins[best]++
	}
	for n, w := range wins {
		if w < 400 || w > 600 {
			t.Errorf("%s wins %d of 5000 slots, want about 500: %v", n, w, wins)
		}
	}
}

func TestRankOrder(t *testing.T) {
	zone := &schema.Constraint{Attribute: "node.meta.zone", Operator: "!=", Value: "z3", Pos: "a.hcl:4:3"}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 3,
		Constraints: []*schema.Constraint{zone},
		Affinities:  []*schema.Affinity{{Attribute: "node.meta.disk", Operator: "==~", Value: "ssd", Weight: 50}}}}
	down := node("d", "zone=z1", "disk=ssd")
	down.Live = false
	v := View{Nodes: []NodeInfo{
		node("e", "zone=z1"), node("a", "zone=z1", "disk=ssd"), down, node("c", "zone=z3", "disk=ssd"),
		node("b", "zone=z2"), node("f", "zone=z2", "disk=ssd"),
	}}
	rs := Rank(u, 0, v, t0)
	if len(rs) != 6 {
		t.Fatalf("%d entries", len(rs))
	}
	// ssd first (a, f by HRW), then b and e by HRW; then c and d, infeasible, by name.
	first := map[string]bool{rs[0].Node: true, rs[1].Node: true}
	second := map[string]bool{rs[2].Node: true, rs[3].Node: true}
	if !first["a"] || !first["f"] || !second["b"] || !second["e"] || rs[4].Node != "c" || rs[5].Node != "d" {
		t.Fatalf("order %v", names(rs))
	}
	for i, r := range rs[:4] {
		if r.Rank != i || !r.Verdict.OK {
			t.Errorf("%s: rank %d, verdict %+v", r.Node, r.Rank, r.Verdict)
		}
	}
	if rs[0].HRW < rs[1].HRW || rs[2].HRW < rs[3].HRW {
		t.Errorf("ties not broken by HRW descending: %v", rs)
	}
	if rs[4].Rank != -1 || rs[4].HRWRank != -1 || rs[4].Verdict.Reason != `node.meta.zone = "z3" fails != "z3" (a.hcl:4:3)` || rs[4].Score != (Score{}) {
		t.Errorf("c: %+v", rs[4])
	}
	if rs[5].Verdict.Filter != FilterNotLive {
		t.Errorf("d: %+v", rs[5])
	}
	// HRWRank is the feasible nodes' order by HRW alone.
	seen := map[int]bool{}
	for _, r := range rs[:4] {
		seen[r.HRWRank] = true
		for _, o := range rs[:4] {
			if (r.HRW > o.HRW) != (r.HRWRank < o.HRWRank) && r.Node != o.Node {
				t.Errorf("HRWRank of %s (%d) and %s (%d) disagree with their hashes", r.Node, r.HRWRank, o.Node, o.HRWRank)
			}
		}
	}
	if len(seen) != 4 {
		t.Errorf("HRWRank not a permutation: %v", rs)
	}
}

func TestRankEmptyAndDuplicates(t *testing.T) {
	if rs := Rank(Unit{}, 0, View{}, t0); len(rs) != 0 {
		t.Errorf("empty view: %v", rs)
	}
	// A repeated name counts once: the first entry.
	off := node("a")
	off.Live = false
	rs := Rank(Unit{Name: "api"}, 0, View{Nodes: []NodeInfo{node("a"), off, node("b")}}, t0)
	if len(rs) != 2 || !rs[0].Verdict.OK || !rs[1].Verdict.OK {
		t.Errorf("duplicates: %+v", rs)
	}
}

func TestRankPaused(t *testing.T) {
	rs := Rank(Unit{Name: "api"}, 0, View{Nodes: []NodeInfo{node("a"), node("b")}, Paused: true}, t0)
	for _, r := range rs {
		if r.Verdict.Filter != FilterPaused || r.Rank != -1 {
			t.Errorf("%s: %+v", r.Node, r)
		}
	}
	if a := Assign(Unit{Name: "api", Placement: &schema.Placement{Count: 2}}, []int{0, 1}, View{Nodes: []NodeInfo{node("a")}, Paused: true}, t0); len(a) != 2 {
		t.Errorf("paused Assign: %v", a)
	} else if _, ok := a.Matched(0); ok {
		t.Errorf("paused Assign matched slot 0: %v", a[0])
	}
}

func TestPenalisedOnlyStillChosen(t *testing.T) {
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 1}}
	v := View{Nodes: []NodeInfo{node("a"), node("b", "x=1")},
		Penalties: map[string]time.Time{"a": t0.Add(time.Hour), "b": t0.Add(time.Hour)}}
	a := Assign(u, []int{0}, v, t0)
	if n, ok := a.Matched(0); !ok || n == "" {
		t.Fatalf("only penalised nodes: no match: %+v", a[0])
	}
	// A free node wins over a penalised one.
	v.Penalties = map[string]time.Time{"a": t0.Add(time.Hour)}
	if n, _ := Assign(u, []int{0}, v, t0).Matched(0); n != "b" {
		t.Errorf("matched %q, want the unpenalised b", n)
	}
	// Once the penalty ran out, it no longer counts; HRW decides between equals.
	v.Penalties = map[string]time.Time{"a": t0}
	rs := Rank(u, 0, v, t0)
	if rs[0].Score.Total != rs[1].Score.Total || rs[0].HRW < rs[1].HRW {
		t.Errorf("expired penalty still counts: %+v", rs)
	}
}

func TestStickinessWins(t *testing.T) {
	u := Unit{Name: "db", Placement: &schema.Placement{Count: 1}, HasVolume: true}
	for _, prev := range []string{"a", "b", "c"} {
		v := View{Nodes: []NodeInfo{node("a"), node("b"), node("c")}, Previous: map[int]string{0: prev}}
		if n, _ := Assign(u, []int{0}, v, t0).Matched(0); n != prev {
			t.Errorf("previous %s: matched %s", prev, n)
		}
	}
}

func TestAssign(t *testing.T) {
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 4}}
	v := View{Nodes: []NodeInfo{node("a"), node("b"), node("c"), node("d"), node("e")},
		Holders: map[int]string{1: "c", 3: "d"}, Load: map[string]int{"c": 1, "d": 1}}
	// 7 is beyond the count, -1 is no slot, 2 is listed twice; 3 is listed
	// as free though Holders says d holds it: it counts as free.
	a := Assign(u, []int{7, 2, 0, -1, 2, 3}, v, t0)
	if len(a) != 3 || a[0] == nil || a[2] == nil || a[3] == nil {
		t.Fatalf("slots %v", keys(a))
	}
	got := map[string]int{}
	for _, k := range []int{0, 2, 3} {
		n, ok := a.Matched(k)
		if !ok || n == "c" {
			t.Errorf("slot %d: matched %q %v", k, n, ok)
		}
		got[n]++
		if r, ok := a.Of(k, n); !ok || r.Rank != 0 {
			t.Errorf("slot %d: the match %s has rank %d", k, n, r.Rank)
		}
	}
	if len(got) != 3 {
		t.Errorf("three slots on %v", got)
	}
	// The inputs are left alone.
	if !reflect.DeepEqual(v.Holders, map[int]string{1: "c", 3: "d"}) || !reflect.DeepEqual(v.Load, map[string]int{"c": 1, "d": 1}) {
		t.Errorf("Assign changed the view: %v %v", v.Holders, v.Load)
	}
	if _, ok := a.Of(0, "nobody"); ok {
		t.Error("Of found a node that is not in the view")
	}
	if _, ok := a.Matched(1); ok {
		t.Error("Matched a slot that was not free")
	}
}

func TestAssignMoreSlotsThanNodes(t *testing.T) {
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 3}}
	v := View{Nodes: []NodeInfo{node("a"), node("b")}}
	a := Assign(u, []int{0, 1, 2}, v, t0)
	m0, ok0 := a.Matched(0)
	m1, ok1 := a.Matched(1)
	_, ok2 := a.Matched(2)
	if !ok0 || !ok1 || ok2 || m0 == m1 {
		t.Errorf("matched %q %q, slot 2 %v", m0, m1, ok2)
	}
	for _, r := range a[2] {
		if r.Verdict.Filter != FilterMaxPerNode {
			t.Errorf("slot 2, %s: %+v", r.Node, r.Verdict)
		}
	}
	// With max_per_node 2, one node takes two slots in one round.
	u.Placement.MaxPerNode = 2
	a = Assign(u, []int{0, 1}, View{Nodes: []NodeInfo{node("a")}}, t0)
	if m0, _ := a.Matched(0); m0 != "a" {
		t.Errorf("slot 0: %q", m0)
	}
	if m1, _ := a.Matched(1); m1 != "a" {
		t.Errorf("slot 1: %q", m1)
	}
	// and anti-affinity sends the second slot elsewhere when it can.
	a = Assign(u, []int{0, 1}, View{Nodes: []NodeInfo{node("a"), node("b")}}, t0)
	m0, _ = a.Matched(0)
	m1, _ = a.Matched(1)
	if m0 == m1 {
		t.Errorf("both slots on %s", m0)
	}
}

// randomView builds a view of up to n nodes with random meta, liveness,
// holders, penalties and load, and a unit with random rules over them.
func randomView(rng *rand.Rand, maxNodes int) (Unit, View, []int) {
	zones := []string{"z1", "z2", "z3"}
	disks := []string{"ssd", "hdd"}
	nn := rng.IntN(maxNodes + 1)
	v := View{Holders: map[int]string{}, Previous: map[int]string{}, Penalties: map[string]time.Time{}, Load: map[string]int{}}
	for i := range nn {
		n := node(fmt.Sprintf("n%02d", i), "zone="+zones[rng.IntN(3)])
		if rng.IntN(3) > 0 {
			n.Meta["disk"] = disks[rng.IntN(2)]
		}
		n.Live = rng.IntN(8) > 0
		n.Eligible = rng.IntN(8) > 0
		n.Draining = rng.IntN(10) == 0
		if rng.IntN(4) == 0 {
			n.Services["db"] = 1 + rng.IntN(2)
		}
		if rng.IntN(4) == 0 {
			v.Penalties[n.Name] = t0.Add(time.Duration(rng.IntN(120)-60) * time.Second)
		}
		v.Load[n.Name] = rng.IntN(5)
		v.Nodes = append(v.Nodes, n)
	}
	p := &schema.Placement{Count: rng.IntN(8), MaxPerNode: rng.IntN(3)}
	if rng.IntN(2) == 0 {
		p.Constraints = append(p.Constraints, &schema.Constraint{Attribute: "node.meta.zone", Operator: "!=", Value: zones[rng.IntN(3)]})
	}
	if rng.IntN(3) == 0 {
		p.Constraints = append(p.Constraints, &schema.Constraint{Attribute: "node.meta.disk", Operator: "is_set"})
	}
	if rng.IntN(4) == 0 {
		p.Constraints = append(p.Constraints, &schema.Constraint{Attribute: "service.db", Operator: "!="})
	}
	if rng.IntN(2) == 0 {
		p.Affinities = append(p.Affinities, &schema.Affinity{Attribute: "node.meta.disk", Operator: []string{"==~", "!=~"}[rng.IntN(2)], Value: "ssd", Weight: rng.IntN(101)})
	}
	if rng.IntN(2) == 0 {
		s := &schema.Spread{Attribute: "node.meta.zone", Weight: rng.IntN(101)}
		if rng.IntN(2) == 0 {
			s.Targets = []schema.SpreadTarget{{Value: "z1", Percent: rng.IntN(101)}, {Value: "z2", Percent: rng.IntN(50)}}
		}
		p.Spreads = append(p.Spreads, s)
	}
	var free []int
	for k := range p.Count + 1 { // one slot beyond the count, to be dropped
		switch {
		case nn > 0 && rng.IntN(3) == 0:
			v.Holders[k] = v.Nodes[rng.IntN(nn)].Name
		default:
			free = append(free, k)
		}
		if nn > 0 && rng.IntN(3) == 0 {
			v.Previous[k] = v.Nodes[rng.IntN(nn)].Name
		}
	}
	return Unit{Name: "api", Placement: p, HasVolume: rng.IntN(2) == 0}, v, free
}

func TestAssignProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 400 {
		u, v, free := randomView(rng, 12)
		a := Assign(u, free, v, t0)
		checkAssignment(t, fmt.Sprint("iteration ", iter), u, v, free, a)

		// Same inputs in another node order: the same assignment.
		w := v
		w.Nodes = append([]NodeInfo(nil), v.Nodes...)
		rng.Shuffle(len(w.Nodes), func(i, j int) { w.Nodes[i], w.Nodes[j] = w.Nodes[j], w.Nodes[i] })
		if b := Assign(u, free, w, t0); !reflect.DeepEqual(a, b) {
			t.Fatalf("iteration %d: node order changed the assignment", iter)
		}
	}
}

// TestAssignDistinctNodes: with max_per_node = 1, k free slots and at least
// k feasible nodes, the k slots go to k different nodes.
func TestAssignDistinctNodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 300 {
		u, v, _ := randomView(rng, 12)
		u.Placement.MaxPerNode = 1
		v.Holders = map[int]string{}
		var free []int
		for k := range u.Placement.Count {
			free = append(free, k)
		}
		feasibleNodes := 0
		for _, n := range v.Nodes {
			if Feasible(u, n, -1, v).OK {
				feasibleNodes++
			}
		}
		a := Assign(u, free, v, t0)
		used := map[string]int{}
		matched := 0
		for _, k := range free {
			if n, ok := a.Matched(k); ok {
				used[n]++
				matched++
			}
		}
		if want := min(feasibleNodes, u.Placement.Count); matched != want || len(used) != matched {
			t.Fatalf("iteration %d: %d feasible nodes, %d slots: matched %d on %d nodes %v", iter, feasibleNodes, u.Placement.Count, matched, len(used), used)
		}
	}
}

// checkAssignment: every match passes the hard rules given the holders and
// the matches before it; infeasible nodes never rank; ranks are 0..n-1.
func checkAssignment(t *testing.T, what string, u Unit, v View, free []int, a Assignment) {
	t.Helper()
	p := placement(u)
	holders := map[int]string{}
	for k, n := range v.Holders {
		holders[k] = n
	}
	for _, k := range free {
		delete(holders, k)
	}
	for k := range p.Count {
		rs, ok := a[k]
		if !ok {
			continue
		}
		for i, r := range rs {
			if r.Verdict.OK != (r.Rank >= 0) || (r.Verdict.OK && r.Rank != i) {
				t.Fatalf("%s: slot %d: %s at %d has rank %d, verdict %+v", what, k, r.Node, i, r.Rank, r.Verdict)
			}
			sc := r.Score
			for _, x := range []float64{sc.Affinity, sc.Spread, sc.AntiAffinity, sc.Penalty, sc.Stickiness, sc.Load, sc.Total} {
				if math.IsNaN(x) || x < -1 || x > 1 {
					t.Fatalf("%s: slot %d: %s score out of [-1, 1]: %+v", what, k, r.Node, sc)
				}
			}
		}
		n, ok := a.Matched(k)
		if !ok {
			continue
		}
		var info NodeInfo
		for _, x := range v.Nodes {
			if x.Name == n {
				info = x
				break
			}
		}
		if ver := Feasible(u, info, k, View{Holders: holders, Paused: v.Paused}); !ver.OK {
			t.Fatalf("%s: slot %d matched to %s, which fails: %s", what, k, n, ver.Reason)
		}
		holders[k] = n
	}
	for k := range a {
		if k < 0 || k >= p.Count {
			t.Fatalf("%s: slot %d outside the count %d", what, k, p.Count)
		}
	}
}

func FuzzAssign(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(5))
	f.Add(uint64(0), uint64(0), uint8(0))
	f.Add(uint64(99), uint64(7), uint8(40))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, maxNodes uint8) {
		rng := rand.New(rand.NewPCG(s1, s2))
		u, v, free := randomView(rng, int(maxNodes%50))
		if rng.IntN(5) == 0 {
			u.Placement = nil
		}
		if rng.IntN(5) == 0 {
			v = View{Nodes: v.Nodes}
		}
		// Malformed views: an unnamed node, a repeated name, a holder
		// nobody knows, negative load and slots.
		if len(v.Nodes) > 0 && rng.IntN(3) == 0 {
			v.Nodes = append(v.Nodes, NodeInfo{Fleet: true, Live: true, Eligible: true}, v.Nodes[0])
			v.Nodes[len(v.Nodes)-1].Live = !v.Nodes[0].Live
		}
		if rng.IntN(3) == 0 && v.Holders != nil {
			v.Holders[rng.IntN(4)] = "ghost"
			v.Holders[-3] = "n00"
			v.Load["n01"] = -5
			free = append(free, -7, math.MaxInt32)
		}
		a := Assign(u, free, v, t0)
		checkAssignment(t, "fuzz", u, v, free, a)
		for k := range a {
			_ = Explain(u.Name, k, a[k])
		}
		_ = Rank(u, rng.IntN(10)-1, v, time.Time{})
	})
}

func names(rs []Ranked) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Node)
	}
	return out
}

func keys(a Assignment) []int {
	var out []int
	for k := range a {
		out = append(out, k)
	}
	return out
}
