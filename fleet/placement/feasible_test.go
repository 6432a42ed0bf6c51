package placement

import (
	"testing"

	"github.com/mariposa-sh/mariposa/schema"
)

func TestFeasibleFilters(t *testing.T) {
	zone := &schema.Constraint{Attribute: "node.meta.zone", Operator: "==", Value: "z1", Pos: "a.hcl:2:3"}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 3, Constraints: []*schema.Constraint{zone}}}
	mod := func(f func(*NodeInfo)) NodeInfo {
		n := node("web-1", "zone=z1")
		f(&n)
		return n
	}
	cases := []struct {
		name   string
		n      NodeInfo
		v      View
		slot   int
		filter Filter
		reason string
	}{
		{"ok", node("web-1", "zone=z1"), View{}, 0, FilterNone, "ok"},
		{"paused first", mod(func(n *NodeInfo) { n.Live = false }), View{Paused: true}, 0, FilterPaused, "placement paused"},
		{"unnamed", mod(func(n *NodeInfo) { n.Name = "" }), View{}, 0, FilterUnnamed, "node has no name"},
		{"not in the fleet", mod(func(n *NodeInfo) { n.Fleet = false }), View{}, 0, FilterNotInFleet, "not in the fleet (its mariposa runs without -cluster)"},
		{"not in the fleet before not live", mod(func(n *NodeInfo) { n.Fleet, n.Live = false, false }), View{}, 0, FilterNotInFleet,
			"not in the fleet (its mariposa runs without -cluster)"},
		{"not live", mod(func(n *NodeInfo) { n.Live = false }), View{}, 0, FilterNotLive, "not live (mariposa liveness check not passing)"},
		{"draining", mod(func(n *NodeInfo) { n.Draining = true }), View{}, 0, FilterDraining, "draining"},
		{"ineligible", mod(func(n *NodeInfo) { n.Eligible = false }), View{}, 0, FilterIneligible, "not eligible"},
		{"constraint", node("web-1", "zone=z2"), View{}, 0, FilterConstraint, `node.meta.zone = "z2" fails == "z1" (a.hcl:2:3)`},
		{"max_per_node", node("web-1", "zone=z1"), View{Holders: map[int]string{1: "web-1"}}, 0, FilterMaxPerNode,
			"max_per_node 1 reached (holds api/1)"},
		{"own slot does not count", node("web-1", "zone=z1"), View{Holders: map[int]string{0: "web-1"}}, 0, FilterNone, "ok"},
		{"slots above count still count", node("web-1", "zone=z1"), View{Holders: map[int]string{7: "web-1"}}, 0, FilterMaxPerNode,
			"max_per_node 1 reached (holds api/7)"},
		{"other nodes' slots do not count", node("web-1", "zone=z1"), View{Holders: map[int]string{1: "web-2", 2: ""}}, 0, FilterNone, "ok"},
	}
	for _, c := range cases {
		got := Feasible(u, c.n, c.slot, c.v)
		if got.OK != (c.filter == FilterNone) || got.Filter != c.filter || got.Reason != c.reason {
			t.Errorf("%s: %+v, want filter %q reason %q", c.name, got, c.filter, c.reason)
		}
	}
}

func TestFeasibleMaxPerNode(t *testing.T) {
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 5, MaxPerNode: 2}}
	v := View{Holders: map[int]string{0: "a", 3: "a", 1: "b"}}
	if got := Feasible(u, node("a"), 2, v); got.OK || got.Reason != "max_per_node 2 reached (holds api/0, api/3)" {
		t.Errorf("a holds 2 of max 2: %+v", got)
	}
	if got := Feasible(u, node("b"), 2, v); !got.OK {
		t.Errorf("b holds 1 of max 2: %+v", got)
	}
	// Default max_per_node is 1 (distinct hosts), also with no placement.
	if got := Feasible(Unit{Name: "api"}, node("b"), 2, v); got.OK {
		t.Errorf("nil placement, b holds 1: %+v", got)
	}
}

func TestFeasibleNilConstraint(t *testing.T) {
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 1, Constraints: []*schema.Constraint{nil}}}
	if got := Feasible(u, node("a"), 0, View{}); !got.OK {
		t.Errorf("nil constraint: %+v", got)
	}
}
