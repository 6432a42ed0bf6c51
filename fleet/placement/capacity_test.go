package placement

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/schema"
)

// capNode is a live fleet node offering cpu millicores and mem MiB, with
// reserve r and node-local services reserving local.
func capNode(name string, cpu, mem int, reserve, local Reservation) NodeInfo {
	n := node(name)
	n.Capacity = &Capacity{Total: Reservation{CPU: cpu, Memory: mem}, Reserve: reserve, Local: local}
	return n
}

func TestCapacityMetaRoundTrip(t *testing.T) {
	c := Capacity{Total: Reservation{4000, 8192}, Reserve: Reservation{500, 512}, Local: Reservation{250, 1024}}
	got := ParseCapacityMeta(CapacityMeta(c))
	if got == nil || *got != c {
		t.Fatalf("round trip: %+v", got)
	}
	if a := c.Allocatable(); a != (Reservation{3250, 6656}) {
		t.Errorf("allocatable: %+v", a)
	}
	for _, tc := range []struct {
		name string
		meta map[string]string
		want *Capacity
	}{
		{"an older mariposa: unknown", map[string]string{"fleet": "true"}, nil},
		{"memory missing: unknown", map[string]string{MetaCapacityCPU: "1000"}, nil},
		{"not a number: unknown", map[string]string{MetaCapacityCPU: "x", MetaCapacityMemory: "1"}, nil},
		{"negative: unknown", map[string]string{MetaCapacityCPU: "1000", MetaCapacityMemory: "1", MetaLocalMemory: "-1"}, nil},
		{"no reserve, no local", map[string]string{MetaCapacityCPU: "1000", MetaCapacityMemory: "512"},
			&Capacity{Total: Reservation{1000, 512}}},
	} {
		if got := ParseCapacityMeta(tc.meta); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestFeasibleCapacity(t *testing.T) {
	mem := func(m int) Reservation { return Reservation{Memory: m} }
	for _, tc := range []struct {
		name     string
		need     Reservation
		node     NodeInfo
		reserved Reservation // by the node's slots
		holds    bool        // the node holds the slot being placed
		want     string      // "" feasible, else the reason
	}{
		{name: "fits", need: mem(256), node: capNode("n", 1000, 1024, Reservation{}, Reservation{})},
		{name: "fits exactly", need: mem(256), node: capNode("n", 1000, 512, Reservation{}, mem(256))},
		{name: "short of memory after reserve, local and slots", need: mem(256),
			node: capNode("n", 1000, 1024, mem(512), mem(192)), reserved: mem(200),
			want: "needs 256 MiB memory, 120 MiB free"},
		{name: "short of cpu", need: Reservation{CPU: 500}, node: capNode("n", 1000, 1024, Reservation{CPU: 600}, Reservation{}),
			want: "needs 500 millicores cpu, 400 free"},
		{name: "short of both", need: Reservation{CPU: 500, Memory: 2048}, node: capNode("n", 250, 1024, Reservation{}, Reservation{}),
			want: "needs 500 millicores cpu, 250 free; needs 2048 MiB memory, 1024 MiB free"},
		{name: "overcommitted shows 0 free", need: mem(1), node: capNode("n", 1000, 100, Reservation{}, mem(300)),
			want: "needs 1 MiB memory, 0 MiB free"},
		{name: "unknown capacity is not limited", need: mem(1 << 20), node: node("n")},
		{name: "a unit without resources fits a full node", node: capNode("n", 0, 0, Reservation{}, mem(5))},
		{name: "the slot's own reservation is not in the way", need: mem(256), node: capNode("n", 1000, 512, Reservation{}, Reservation{}),
			reserved: mem(512), holds: true},
		{name: "but others are", need: mem(256), node: capNode("n", 1000, 512, Reservation{}, Reservation{}),
			reserved: mem(512),
			want:     "needs 256 MiB memory, 0 MiB free"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Unit{Name: "api", Placement: &schema.Placement{Count: 2, MaxPerNode: 2}, Resources: tc.need}
			v := View{Nodes: []NodeInfo{tc.node}, Reserved: map[string]Reservation{"n": tc.reserved}, Holders: map[int]string{}}
			if tc.holds {
				v.Holders[1] = "n"
			}
			got := Feasible(u, tc.node, 1, v)
			if tc.want == "" {
				if !got.OK {
					t.Errorf("infeasible: %+v", got)
				}
				return
			}
			if got.OK || got.Filter != FilterCapacity || got.Reason != tc.want {
				t.Errorf("got %+v, want capacity %q", got, tc.want)
			}
		})
	}
}

// Bin-packing scores the node fullest after placement highest; spread the
// emptiest; a node of unknown capacity scores 0; a unit without resources
// scores by load as before.
func TestScoreCapacity(t *testing.T) {
	nodes := []NodeInfo{
		capNode("big", 4000, 4096, Reservation{}, Reservation{}),
		capNode("mid", 2000, 2048, Reservation{}, Reservation{}),
		capNode("small", 1000, 1024, Reservation{}, Reservation{Memory: 256}),
		node("old"),
	}
	need := Reservation{CPU: 500, Memory: 512}
	reserved := map[string]Reservation{"mid": {CPU: 500, Memory: 512}}
	for _, tc := range []struct {
		name string
		alg  string
		want map[string]float64 // capacity component per node
	}{
		// big: (500/4000 + 512/4096)/2 = 0.125; mid: (1000/2000 + 1024/2048)/2 =
		// 0.5; small: (500/1000 + 768/1024)/2 = 0.625.
		{"binpack", "", map[string]float64{"big": 0.125, "mid": 0.5, "small": 0.625, "old": 0}},
		{"spread", schema.AlgorithmSpread, map[string]float64{"big": -0.125, "mid": -0.5, "small": -0.625, "old": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Unit{Name: "api", Placement: &schema.Placement{Count: 1, SchedulerAlgorithm: tc.alg}, Resources: need}
			v := View{Nodes: nodes, Reserved: reserved, Load: map[string]int{"mid": 1}}
			for _, n := range nodes {
				s := ScoreNode(u, n, 0, v, t0)
				if !s.Applied.Has(CompCapacity) || s.Applied.Has(CompLoad) {
					t.Fatalf("%s: applied %s, want capacity without load", n.Name, s.Applied)
				}
				if d := s.Capacity - tc.want[n.Name]; d > 1e-9 || d < -1e-9 {
					t.Errorf("%s: capacity %v, want %v", n.Name, s.Capacity, tc.want[n.Name])
				}
			}
			rs := Rank(u, 0, v, t0)
			best := "small"
			if tc.alg == schema.AlgorithmSpread {
				best = "old" // unknown capacity scores 0, above every known one
			}
			if rs[0].Node != best {
				t.Errorf("best %s, want %s:\n%s", rs[0].Node, best, Explain("api", 0, rs))
			}
		})
	}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 1}}
	s := ScoreNode(u, nodes[1], 0, View{Nodes: nodes, Load: map[string]int{"mid": 1}}, t0)
	if s.Applied.Has(CompCapacity) || !s.Applied.Has(CompLoad) || s.Load != -1 {
		t.Errorf("no resources: %+v", s)
	}
}

// Assign bin-packs several slots: each match reserves its node's capacity
// for the next, so the small node fills first, then the next fullest.
func TestAssignBinpacks(t *testing.T) {
	nodes := []NodeInfo{
		capNode("a", 4000, 1024, Reservation{}, Reservation{}),
		capNode("b", 4000, 768, Reservation{}, Reservation{}),
		capNode("c", 4000, 512, Reservation{}, Reservation{}),
	}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 5, MaxPerNode: 5}, Resources: Reservation{Memory: 256}}
	asg := Assign(u, []int{0, 1, 2, 3, 4}, View{Nodes: nodes}, t0)
	var got []string
	for k := range 5 {
		n, _ := asg.Matched(k)
		got = append(got, n)
	}
	// Anti-affinity weighs against a node already holding the unit, so
	// packing is by the capacity and anti-affinity together; the verdicts
	// keep every node within its memory.
	per := map[string]int{}
	for _, n := range got {
		per[n]++
	}
	if per["a"] > 4 || per["b"] > 3 || per["c"] > 2 || len(got) != 5 || per[""] > 0 {
		t.Errorf("over capacity: %v", got)
	}
	// Each match reserves its node's capacity for the next slot: one node
	// of 512 MiB takes two slots of 256, and the third stays unplaced.
	one := Unit{Name: "api", Placement: &schema.Placement{Count: 3, MaxPerNode: 3}, Resources: Reservation{Memory: 256}}
	asg = Assign(one, []int{0, 1, 2}, View{Nodes: nodes[2:]}, t0)
	for k, want := range []bool{true, true, false} {
		if _, ok := asg.Matched(k); ok != want {
			t.Errorf("one node: slot %d matched %v, want %v:\n%s", k, ok, want, Explain("api", k, asg[k]))
		}
	}
	if rs := asg[2]; len(rs) != 1 || rs[0].Verdict.Reason != "needs 256 MiB memory, 0 MiB free" {
		t.Errorf("one node: slot 2 %+v", rs)
	}
	// Different units of one slot each: binpack fills c first.
	var order []string
	v := View{Nodes: nodes, Reserved: map[string]Reservation{}}
	for i := range 4 {
		u := Unit{Name: "u" + string(rune('0'+i)), Placement: &schema.Placement{Count: 1}, Resources: Reservation{Memory: 256}}
		n, ok := Assign(u, []int{0}, v, t0).Matched(0)
		if !ok {
			t.Fatalf("unit %d unplaced", i)
		}
		order = append(order, n)
		v.Reserved[n] = v.Reserved[n].Add(u.Resources)
	}
	if want := []string{"c", "c", "b", "b"}; !reflect.DeepEqual(order, want) {
		t.Errorf("binpack order %v, want %v", order, want)
	}
}

func TestFitCapacity(t *testing.T) {
	nodes := []NodeInfo{
		capNode("n1", 2000, 1024, Reservation{Memory: 512}, Reservation{}),
		capNode("n2", 2000, 2048, Reservation{}, Reservation{Memory: 1800}),
		capNode("n3", 500, 4096, Reservation{}, Reservation{}),
	}
	for _, tc := range []struct {
		name     string
		count    int
		need     Reservation
		reserved map[string]Reservation
		nodes    []NodeInfo
		want     string
		unplaced bool
	}{
		{name: "fits", count: 1, need: Reservation{CPU: 100, Memory: 256}},
		{name: "too big for any node", count: 1, need: Reservation{CPU: 1000, Memory: 1024}, unplaced: true,
			want: "api: no live node can run it (0 of 3 feasible):\n" +
				"  n1: needs 1024 MiB memory, 512 MiB free\n" +
				"  n2: needs 1024 MiB memory, 248 MiB free\n" +
				"  n3: needs 1000 millicores cpu, 500 free"},
		{name: "an old node without capacity takes it", count: 1, need: Reservation{Memory: 1 << 20},
			nodes: append([]NodeInfo{node("old")}, nodes...)},
		{name: "short: other units fill n1", count: 3, need: Reservation{Memory: 256},
			reserved: map[string]Reservation{"n1": {Memory: 400}},
			want: "api: count 3, but 2 of 3 live nodes are feasible at max_per_node 1: room for 1; 2 slots stay free until more nodes qualify:\n" +
				"  n2: needs 256 MiB memory, 248 MiB free\n" +
				"  n1: room for 0 (112 MiB memory free, 256 MiB memory each)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.nodes
			if ns == nil {
				ns = nodes
			}
			u := Unit{Name: "api", Placement: &schema.Placement{Count: tc.count, MaxPerNode: 1}, Resources: tc.need}
			f := FitOfReserved(u, ns, tc.reserved)
			if f.Unplaceable != tc.unplaced {
				t.Errorf("unplaceable %v, want %v", f.Unplaceable, tc.unplaced)
			}
			if got := f.String(); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	// Room: max_per_node bounded by what fits.
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 10, MaxPerNode: 4}, Resources: Reservation{Memory: 1024}}
	if f := FitOf(u, nodes); f.Capacity != 4 || f.Feasible != 1 || !f.Short() || len(f.Room) != 0 || !strings.Contains(f.String(), "room for 4;") {
		t.Errorf("room: %+v\n%s", f, f.String())
	}
}

func TestParseReservation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Reservation
		err  string
	}{
		{in: "cpu=500,memory=512", want: Reservation{500, 512}},
		{in: " memory = 256 ", want: Reservation{Memory: 256}},
		{in: "cpu=1000", want: Reservation{CPU: 1000}},
		{in: "", want: Reservation{}},
		{in: "cpu=500,cpu=600", err: `"cpu=600": cpu given twice`},
		{in: "disk=5", err: `"disk=5": unknown resource "disk" (cpu in millicores, memory in MiB)`},
		{in: "memory=-1", err: `"memory=-1": memory wants a whole number ≥ 0`},
		{in: "memory=1.5", err: `"memory=1.5": memory wants a whole number ≥ 0`},
		{in: "512", err: `"512": want cpu=<millicores> or memory=<MiB>`},
	} {
		got, err := ParseReservation(tc.in)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("%q: error %v, want %s", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
