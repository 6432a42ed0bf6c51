package placement

import (
	"math"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestAffinity(t *testing.T) {
	p := &schema.Placement{Count: 3, Affinities: []*schema.Affinity{
		{Attribute: "node.meta.disk", Operator: "==~", Value: "ssd", Weight: 50},
		{Attribute: "node.meta.zone", Operator: "!=~", Value: "z3", Weight: 25},
	}}
	u := Unit{Name: "api", Placement: p}
	cases := []struct {
		n    NodeInfo
		want float64
	}{
		{node("a", "disk=ssd", "zone=z1"), 50.0 / 75},
		{node("b", "disk=ssd", "zone=z3"), 25.0 / 75},
		{node("c", "disk=hdd", "zone=z3"), -25.0 / 75},
		{node("d", "disk=hdd", "zone=z1"), 0},
		{node("e"), 0}, // unset: ==~ does not match, !=~ does not push down
	}
	for _, c := range cases {
		s := ScoreNode(u, c.n, 0, View{}, t0)
		if !near(s.Affinity, c.want) || !s.Applied.Has(CompAffinity) {
			t.Errorf("%s: affinity %v (applied %s), want %v", c.n.Name, s.Affinity, s.Applied, c.want)
		}
	}

	// Weight 0 is the default 50; constraint operators count as preferences;
	// service.<name> with no value is co-location.
	db := node("db-host")
	db.Services["db"] = 1
	cases2 := []struct {
		a    schema.Affinity
		n    NodeInfo
		want float64
	}{
		{schema.Affinity{Attribute: "node.name", Operator: "regexp", Value: "^web"}, node("web-1"), 1},
		{schema.Affinity{Attribute: "node.name", Operator: "regexp", Value: "^web"}, node("db-1"), 0},
		{schema.Affinity{Attribute: "service.db", Operator: "==~"}, db, 1},
		{schema.Affinity{Attribute: "service.db", Operator: "==~"}, node("x"), 0},
		{schema.Affinity{Attribute: "service.db", Operator: "!=~"}, db, -1},
		{schema.Affinity{Attribute: "service.db", Operator: "!=~"}, node("x"), 0},
		{schema.Affinity{Attribute: "node.meta.zone", Operator: "!=", Value: "z1"}, node("x", "zone=z2"), 1},
		{schema.Affinity{Attribute: "node.name", Operator: "==~", Value: "x", Weight: -20}, node("x"), -1},
		{schema.Affinity{Attribute: "node.name", Operator: "regexp", Value: "("}, node("x"), 0}, // broken: matches nowhere
		{schema.Affinity{Attribute: "node.bogus", Operator: "==~", Value: "x"}, node("x"), 0},   // unknown attribute
		{schema.Affinity{Attribute: "node.name", Operator: "~~", Value: "x"}, node("x"), 0},     // unknown operator
		{schema.Affinity{Attribute: "mariposa.version", Operator: "version", Value: ">= 1"}, node("x"), 1},
	}
	for _, c := range cases2 {
		a := c.a
		u := Unit{Name: "api", Placement: &schema.Placement{Count: 1, Affinities: []*schema.Affinity{&a}}}
		if s := ScoreNode(u, c.n, 0, View{}, t0); !near(s.Affinity, c.want) {
			t.Errorf("%+v on %s: affinity %v, want %v", c.a, c.n.Name, s.Affinity, c.want)
		}
	}
}

func TestSpreadTargets(t *testing.T) {
	nodes := []NodeInfo{node("a1", "zone=z1"), node("a2", "zone=z1"), node("b1", "zone=z2"), node("b2", "zone=z2"),
		node("b3", "zone=z2"), node("c1", "zone=z3"), node("n")}
	spread := &schema.Spread{Attribute: "node.meta.zone", Weight: 50,
		Targets: []schema.SpreadTarget{{Value: "z1", Percent: 70}, {Value: "z2", Percent: 30}}}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 10, MaxPerNode: 5, Spreads: []*schema.Spread{spread}}}
	// z1 holds 2, z2 holds 3; slot 9 is being placed (its own holder excluded).
	v := View{Nodes: nodes, Holders: map[int]string{0: "a1", 1: "a2", 2: "b1", 3: "b2", 4: "b3", 9: "a1"}}
	cases := map[string]float64{
		"a1": (7.0 - 3) / 7, // desired 7, used 2 + this one
		"b1": (3.0 - 4) / 3, // desired 3, used 3 + this one
		"c1": -1,            // no target and no remainder
		"n":  -1,            // attribute not set
	}
	for name, want := range cases {
		s := ScoreNode(u, nodes[indexOf(nodes, name)], 9, v, t0)
		if !near(s.Spread, want) || !s.Applied.Has(CompSpread) {
			t.Errorf("%s: spread %v, want %v", name, s.Spread, want)
		}
	}

	// Targets below 100 %: the remainder goes to the other values ("*").
	spread.Targets = []schema.SpreadTarget{{Value: "z1", Percent: 50}}
	u.Placement.Count = 4
	v = View{Nodes: nodes, Holders: map[int]string{0: "a1"}}
	for name, want := range map[string]float64{"a2": (2.0 - 2) / 2, "c1": (2.0 - 1) / 2} {
		if s := ScoreNode(u, nodes[indexOf(nodes, name)], 1, v, t0); !near(s.Spread, want) {
			t.Errorf("remainder, %s: spread %v, want %v", name, s.Spread, want)
		}
	}
	// An explicit "*" target, and a 0 % target.
	spread.Targets = []schema.SpreadTarget{{Value: "z1", Percent: 0}, {Value: "*", Percent: 100}}
	for name, want := range map[string]float64{"a2": -1, "c1": (4.0 - 1) / 4} {
		if s := ScoreNode(u, nodes[indexOf(nodes, name)], 1, v, t0); !near(s.Spread, want) {
			t.Errorf("explicit *, %s: spread %v, want %v", name, s.Spread, want)
		}
	}
	// Count 0: no desired count anywhere.
	u.Placement.Count = 0
	if s := ScoreNode(u, nodes[0], 0, v, t0); s.Spread != -1 {
		t.Errorf("count 0: spread %v", s.Spread)
	}
}

func TestSpreadEven(t *testing.T) {
	nodes := []NodeInfo{node("a1", "zone=z1"), node("a2", "zone=z1"), node("a3", "zone=z1"), node("b1", "zone=z2"),
		node("b2", "zone=z2"), node("c1", "zone=z3"), node("n")}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 6, MaxPerNode: 6,
		Spreads: []*schema.Spread{{Attribute: "node.meta.zone"}}}}
	cases := []struct {
		holders map[int]string
		want    map[string]float64
	}{
		{nil, map[string]float64{"a1": 0, "c1": 0, "n": -1}},
		{map[int]string{0: "a1", 1: "b1"}, map[string]float64{"a2": -1, "b2": -1, "c1": 1}},
		{map[int]string{0: "a1", 1: "a2", 2: "b1"}, map[string]float64{"a3": -1, "b2": 1, "c1": 1}},
		{map[int]string{0: "a1", 1: "a2", 2: "a3", 3: "b1", 4: "b2"}, map[string]float64{"a1": -0.5, "b1": 0.5, "c1": 1}},
		{map[int]string{0: "a1", 1: "a2", 2: "a3", 3: "b1"}, map[string]float64{"a1": -1, "b1": 1}}, // clamped from -2 and 2
		{map[int]string{0: "gone", 1: "a1"}, map[string]float64{"a2": -1, "b1": 1}},                 // unknown holder ignored
	}
	for i, c := range cases {
		v := View{Nodes: nodes, Holders: c.holders}
		for name, want := range c.want {
			if s := ScoreNode(u, nodes[indexOf(nodes, name)], 5, v, t0); !near(s.Spread, want) {
				t.Errorf("case %d, %s: spread %v, want %v", i, name, s.Spread, want)
			}
		}
	}
}

func TestSpreadWeighted(t *testing.T) {
	nodes := []NodeInfo{node("a", "zone=z1", "rack=r1"), node("b", "zone=z2", "rack=r1")}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 4, MaxPerNode: 4, Spreads: []*schema.Spread{
		{Attribute: "node.meta.zone", Weight: 75},
		{Attribute: "node.meta.rack", Weight: 25},
	}}}
	v := View{Nodes: nodes, Holders: map[int]string{0: "a"}}
	// zone: a -1 (even at the least), b +1; rack: both -1 (even).
	for name, want := range map[string]float64{"a": (75*-1 + 25*-1) / 100.0, "b": (75*1 + 25*-1) / 100.0} {
		if s := ScoreNode(u, nodes[indexOf(nodes, name)], 1, v, t0); !near(s.Spread, want) {
			t.Errorf("%s: spread %v, want %v", name, s.Spread, want)
		}
	}
}

func TestAntiAffinityPenaltyStickinessLoad(t *testing.T) {
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 3, MaxPerNode: 3}, HasVolume: true}
	v := View{
		Holders:   map[int]string{0: "a", 1: "a", 2: "b"},
		Previous:  map[int]string{2: "c"},
		Penalties: map[string]time.Time{"a": t0.Add(time.Minute), "b": t0, "c": t0.Add(-time.Minute)},
		Load:      map[string]int{"a": 8, "b": 2},
	}
	cases := []struct {
		node                    string
		slot                    int
		anti, pen, sticky, load float64
		applied                 Components
	}{
		// Slot 2 being placed: a holds 0 and 1, b holds only slot 2 itself.
		{"a", 2, -1, -1, 0, -1, CompAntiAffinity | CompPenalty | CompStickiness | CompLoad},
		{"b", 2, 0, 0, 0, -0.25, CompAntiAffinity | CompPenalty | CompStickiness | CompLoad},
		{"c", 2, 0, 0, 1, 0, CompAntiAffinity | CompPenalty | CompStickiness | CompLoad},
		// Slot 0: a holds 1 other → −(1+1)/3; no previous node for slot 0.
		{"a", 0, -2.0 / 3, -1, 0, -1, CompAntiAffinity | CompPenalty | CompLoad},
	}
	for _, c := range cases {
		s := ScoreNode(u, NodeInfo{Name: c.node}, c.slot, v, t0)
		if !near(s.AntiAffinity, c.anti) || s.Penalty != c.pen || s.Stickiness != c.sticky || !near(s.Load, c.load) || s.Applied != c.applied {
			t.Errorf("%s slot %d: %+v (applied %s), want anti %v pen %v sticky %v load %v applied %s",
				c.node, c.slot, s, s.Applied, c.anti, c.pen, c.sticky, c.load, c.applied)
		}
		var sum float64
		var k int
		for _, x := range []struct {
			c Components
			v float64
		}{{CompAntiAffinity, s.AntiAffinity}, {CompPenalty, s.Penalty}, {CompStickiness, s.Stickiness}, {CompLoad, s.Load}} {
			if s.Applied.Has(x.c) {
				sum += x.v
				k++
			}
		}
		if !near(s.Total, sum/float64(k)) {
			t.Errorf("%s slot %d: total %v, want the mean %v", c.node, c.slot, s.Total, sum/float64(k))
		}
	}

	// Without a volume there is no stickiness; expired penalties do not apply.
	u.HasVolume = false
	v.Penalties = map[string]time.Time{"a": t0}
	s := ScoreNode(u, NodeInfo{Name: "c"}, 2, v, t0)
	if s.Applied != CompAntiAffinity|CompLoad || s.Stickiness != 0 || s.Penalty != 0 {
		t.Errorf("no volume, penalty over: %+v applied %s", s, s.Applied)
	}
	// Count 0 with holdings: the strongest anti-affinity.
	u.Placement.Count = 0
	if s := ScoreNode(u, NodeInfo{Name: "a"}, 5, v, t0); s.AntiAffinity != -1 {
		t.Errorf("count 0: anti-affinity %v", s.AntiAffinity)
	}
}

func TestScoreEmpty(t *testing.T) {
	s := ScoreNode(Unit{}, NodeInfo{}, 0, View{}, time.Time{})
	if s.Total != 0 || s.Applied != CompAntiAffinity|CompLoad {
		t.Errorf("empty: %+v", s)
	}
	if got := (CompAffinity | CompLoad).String(); got != "affinity,load" {
		t.Errorf("Components.String: %q", got)
	}
}

func indexOf(ns []NodeInfo, name string) int {
	for i, n := range ns {
		if n.Name == name {
			return i
		}
	}
	panic("no node " + name)
}
