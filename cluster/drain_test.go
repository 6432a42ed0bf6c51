package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

func TestDrainStep(t *testing.T) {
	now := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	unit := func(name string, exclusive bool) UnitSpec {
		return UnitSpec{Unit: Unit{Name: name, Placement: &schema.Placement{Count: 3, Exclusive: exclusive}}}
	}
	web, db := unit("web", false), unit("db", true)
	held := func() map[string]*heldSlot {
		return map[string]*heldSlot{"web/0": {unit: web, k: 0}, "web/2": {unit: web, k: 2}, "db/1": {unit: db, k: 1}}
	}
	other := []NodeInfo{{Name: "me", Fleet: true, Live: true, Eligible: true}, {Name: "a", Fleet: true, Live: true, Eligible: true}}
	nowhere := []NodeInfo{{Name: "me", Fleet: true, Live: true, Eligible: true}, {Name: "a", Fleet: true, Live: false, Eligible: true}}
	cases := []struct {
		name          string
		drains        map[string]DrainRecord
		handoffs      map[string]*handoff
		nodes         []NodeInfo // default: other
		orphans, stop []string
	}{
		{name: "no other node can take them: nothing moves, before the deadline",
			drains: map[string]DrainRecord{"me": {Deadline: now.Add(time.Hour)}}, nodes: nowhere},
		{name: "no other node can take them: nothing moves past the deadline either",
			drains: map[string]DrainRecord{"me": {Deadline: now.Add(-time.Second)}}, nodes: nowhere},
		{name: "no other node can take them, forced: everything at the deadline",
			drains: map[string]DrainRecord{"me": {Deadline: now.Add(-time.Second), Force: true}}, nodes: nowhere,
			stop: []string{"db/1", "web/0", "web/2"}},
		{name: "forced, before the deadline: nothing moves",
			drains: map[string]DrainRecord{"me": {Deadline: now.Add(time.Hour), Force: true}}, nodes: nowhere},
		{name: "not draining: nothing", drains: map[string]DrainRecord{"other": {Deadline: now.Add(time.Hour)}}},
		{name: "draining: the first slot by name; an exclusive one stops",
			drains: map[string]DrainRecord{"me": {Deadline: now.Add(time.Hour)}}, stop: []string{"db/1"}},
		{name: "a handoff under way: wait",
			drains:   map[string]DrainRecord{"me": {Deadline: now.Add(time.Hour)}},
			handoffs: map[string]*handoff{"db/1": {}}},
		{name: "the handoff passed: the next slot, released with its instance running",
			drains:   map[string]DrainRecord{"me": {Deadline: now.Add(time.Hour)}},
			handoffs: map[string]*handoff{"db/1": {passed: true}}, orphans: []string{"web/0"}},
		{name: "past the deadline: everything left at once, stopped",
			drains:   map[string]DrainRecord{"me": {Deadline: now.Add(-time.Second)}},
			handoffs: map[string]*handoff{"db/1": {}}, stop: []string{"web/0", "web/2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFleet(FleetConfig{Node: "me"})
			f.held, f.drains, f.nodes = held(), tc.drains, tc.nodes
			if tc.nodes == nil {
				f.nodes = other
			}
			if tc.handoffs != nil {
				f.handoffs = tc.handoffs
			}
			orphans, stops := f.drainStepLocked(now)
			if !slices.Equal(orphans, tc.orphans) || !slices.Equal(stops, tc.stop) {
				t.Fatalf("orphans %v stops %v, want %v %v", orphans, stops, tc.orphans, tc.stop)
			}
		})
	}
	nodes := markDraining([]NodeInfo{{Name: "a", Fleet: true, Live: true, Eligible: true}, {Name: "me", Fleet: true, Live: true, Eligible: true}},
		map[string]DrainRecord{"me": {}})
	if nodes[0].Draining || !nodes[1].Draining {
		t.Fatalf("markDraining: %+v", nodes)
	}
	if v := Feasible(Unit{Name: "web", Placement: &schema.Placement{Count: 1}}, nodes[1], 0, View{}); v.OK || v.Filter != FilterDraining {
		t.Fatalf("a draining node is feasible: %+v", v)
	}
}
