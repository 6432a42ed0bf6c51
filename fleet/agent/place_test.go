package agent

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// placeUnit is a unit name for which HRW puts "top" ahead of "me" on slot
// 0: without the placement inputs, "me" ranks second.
func placeUnit(t *testing.T) string {
	for i := range 100 {
		name := fmt.Sprintf("web%d", i)
		if placement.HRW(name, 0, "top") > placement.HRW(name, 0, "me") {
			return name
		}
	}
	t.Fatal("no unit name")
	return ""
}

// rankFor runs the machine until it claims slot 0 of unit and returns its
// rank there (the claim's delay in steps), -1 when it never claims.
func rankFor(m *machine, acts []any) int {
	m.t.Helper()
	start := m.now
	for range 20 {
		if c, ok := find[Claim](acts); ok {
			if c.Slot.K != 0 {
				m.t.Fatalf("claimed %v", c.Slot)
			}
			return int(m.now.Sub(start) / placement.DefaultStep)
		}
		w, ok := find[Wake](acts)
		if !ok || !w.At.After(m.now) || w.At.Sub(start) > time.Minute {
			return -1
		}
		m.now = w.At
		acts = m.step(Tick{})
	}
	return -1
}

// The step machine ranks by CLUSTER.md section 4: a constraint excludes a
// node (on its meta, or on the services it runs: service.<name>, which
// also hold the unit's claims back until their first answer), a full node
// is not feasible, a penalty moves a slot, stickiness prefers the
// previous holder. "me" ranks second by HRW alone; each case
// gives it the first place, or none.
func TestPlacementInputs(t *testing.T) {
	name := placeUnit(t)
	zone := func(z string) map[string]string { return map[string]string{"zone": z} }
	capa := func(cpu int) *placement.Capacity {
		return &placement.Capacity{Total: placement.Reservation{CPU: cpu, Memory: 1 << 20}}
	}
	notZ1 := &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "${node.meta.zone}", Operator: "!=", Value: "z1"}}}
	big := Unit{Name: "big", Count: 1, MaxPerNode: 1, Resources: placement.Reservation{CPU: 800}}
	withDB := &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "service.db", Operator: schema.OpIsSet}}}
	notWithDB := &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "${service.db}", Operator: schema.OpIsNotSet}}}
	nearDB := &schema.Placement{Affinities: []*schema.Affinity{{Attribute: "service.db", Operator: schema.OpIsSet, Weight: 100}}}
	cases := []struct {
		name  string
		unit  Unit
		other []Unit
		info  map[string]placement.NodeInfo
		in    []any // before the unit's slots answer
		// claim: me claims this other unit's slot 0 (free in its first
		// answer, and the claim answered) before the unit's slots answer.
		claim string
		want  int
	}{
		{name: "HRW alone", unit: Unit{Name: name, Count: 1, MaxPerNode: 1}, want: 1},
		{name: "constraint excludes top", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: notZ1},
			info: map[string]placement.NodeInfo{"me": {Meta: zone("z2"), Eligible: true}, "top": {Meta: zone("z1"), Eligible: true}}, want: 0},
		{name: "constraint excludes me", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: notZ1},
			info: map[string]placement.NodeInfo{"me": {Meta: zone("z1"), Eligible: true}, "top": {Meta: zone("z2"), Eligible: true}}, want: -1},
		{name: "capacity: top is full", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Resources: placement.Reservation{CPU: 500}},
			other: []Unit{big},
			info:  map[string]placement.NodeInfo{"me": {Capacity: capa(1000), Eligible: true}, "top": {Capacity: capa(1000), Eligible: true}},
			in:    []any{slots("big", 3, Slot{K: 0, Node: "top", ModifyIndex: 3})}, want: 0},
		{name: "capacity: top has room", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Resources: placement.Reservation{CPU: 100}},
			other: []Unit{big},
			info:  map[string]placement.NodeInfo{"me": {Capacity: capa(1000), Eligible: true}, "top": {Capacity: capa(1000), Eligible: true}},
			in:    []any{slots("big", 3, Slot{K: 0, Node: "top", ModifyIndex: 3})}, want: 1},
		{name: "capacity: me holds big, its index not answered yet", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Resources: placement.Reservation{CPU: 500}},
			other: []Unit{big},
			info:  map[string]placement.NodeInfo{"me": {Capacity: capa(1000), Eligible: true}, "top": {Capacity: capa(1000), Eligible: true}},
			claim: "big", want: -1},
		{name: "penalty on top", unit: Unit{Name: name, Count: 1, MaxPerNode: 1},
			in: []any{PenaltiesAnswer{Penalties: map[string]map[string]time.Time{name: {"top": t0.Add(time.Hour)}}}}, want: 0},
		{name: "penalty ended", unit: Unit{Name: name, Count: 1, MaxPerNode: 1},
			in: []any{PenaltiesAnswer{Penalties: map[string]map[string]time.Time{name: {"top": t0.Add(-time.Second)}}}}, want: 1},
		{name: "service.db is_set: db runs on me", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: withDB},
			in: []any{ServicesAnswer{Service: "db", Nodes: map[string]int{"me": 1}}}, want: 0},
		{name: "service.db is_set: db runs on top", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: withDB},
			in: []any{ServicesAnswer{Service: "db", Nodes: map[string]int{"top": 2}}}, want: -1},
		{name: "service.db not_set: db runs on top", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: notWithDB},
			in: []any{ServicesAnswer{Service: "db", Nodes: map[string]int{"top": 1}}}, want: 0},
		{name: "service.db not_set: db not heard yet, no claim", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: notWithDB},
			want: -1},
		{name: "service.db not_set: another service heard, not db", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: notWithDB},
			in: []any{ServicesAnswer{Service: "dbx", Nodes: map[string]int{"me": 1}}}, want: -1},
		{name: "affinity to service.db: db runs on me", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: nearDB},
			in: []any{ServicesAnswer{Service: "db", Nodes: map[string]int{"me": 1}}}, want: 0},
		{name: "affinity to service.db: db runs nowhere", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Placement: nearDB},
			in: []any{ServicesAnswer{Service: "db"}}, want: 1},
		{name: "sticky: me held it last (read)", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Sticky: true},
			in: []any{PreviousAnswer{Unit: name, Previous: map[int]string{0: "me"}}}, want: 0},
		{name: "not sticky: previous ignored", unit: Unit{Name: name, Count: 1, MaxPerNode: 1},
			in: []any{PreviousAnswer{Unit: name, Previous: map[int]string{0: "me"}}}, want: 1},
		{name: "sticky: top held it last (seen)", unit: Unit{Name: name, Count: 1, MaxPerNode: 1, Sticky: true},
			in: []any{PreviousAnswer{Unit: name, Previous: map[int]string{0: "me"}},
				slots(name, 2, Slot{K: 0, Node: "top", ModifyIndex: 2})}, want: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &machine{t: t, a: New(Config{Node: "me", Seed: 1}), now: t0}
			m.step(UnitsAnswer{Units: append([]Unit{tc.unit}, tc.other...)})
			m.step(SessionCreated{ID: "s-me"})
			m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me", "top"}, Info: tc.info}})
			for _, in := range tc.in {
				m.step(in)
			}
			if tc.claim != "" {
				if r := rankFor(m, m.step(slots(tc.claim, 2, Slot{K: 0, Released: true}))); r < 0 {
					t.Fatalf("never claimed %s/0", tc.claim)
				}
				m.step(ClaimDone{Slot: SlotID{Unit: tc.claim, K: 0}, OK: true, Index: 42})
			}
			got := rankFor(m, m.step(slots(tc.unit.Name, 10, Slot{K: 0, Released: true})))
			if got != tc.want {
				t.Fatalf("rank %d, want %d", got, tc.want)
			}
		})
	}
}

// UnitOf carries the placement block, the resources, stickiness and the
// volumes that move.
func TestUnitOf(t *testing.T) {
	sticky := &schema.Placement{Count: 3, Exclusive: true, Volumes: []*schema.Volume{{Handoff: schema.HandoffSticky}}}
	snap := &schema.Placement{Count: 1, MaxPerNode: 2, Volumes: []*schema.Volume{{Handoff: schema.HandoffNone}, {Handoff: schema.HandoffSnapshot}}}
	for _, tc := range []struct {
		in   placement.Unit
		want Unit
	}{
		{placement.Unit{Name: "db", Placement: sticky, HasVolume: true, Resources: placement.Reservation{CPU: 5}},
			Unit{Name: "db", Count: 3, Exclusive: true, MaxPerNode: schema.DefaultMaxPerNode, Placement: sticky, Sticky: true, Resources: placement.Reservation{CPU: 5}}},
		{placement.Unit{Name: "q", Placement: snap, HasVolume: true},
			Unit{Name: "q", Count: 1, MaxPerNode: 2, Placement: snap, Sticky: true, Volumes: true}},
		{placement.Unit{Name: "none"}, Unit{Name: "none", MaxPerNode: schema.DefaultMaxPerNode}},
	} {
		if u := UnitOf(tc.in); u != tc.want {
			t.Errorf("UnitOf(%s): %+v, want %+v", tc.in.Name, u, tc.want)
		}
	}
}

// A unit that no node could take while the nodes' attributes were unknown
// is ranked again when they come (the members' answer), without a new
// answer of its index.
func TestNewNodeInfoRanksAgain(t *testing.T) {
	u := Unit{Name: "web", Count: 1, MaxPerNode: 1, Placement: &schema.Placement{
		Constraints: []*schema.Constraint{{Attribute: "${node.meta.zone}", Operator: "=", Value: "z1"}}}}
	m := &machine{t: t, a: New(Config{Node: "me", Seed: 1}), now: t0}
	m.step(UnitsAnswer{Units: []Unit{u}})
	m.step(SessionCreated{ID: "s-me"})
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me"}}})
	if got := rankFor(m, m.step(slots("web", 10))); got != -1 {
		t.Fatalf("ranked %d without the node's meta", got)
	}
	info := map[string]placement.NodeInfo{"me": {Meta: map[string]string{"zone": "z1"}, Eligible: true}}
	if got := rankFor(m, m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me"}, Info: info}})); got != 0 {
		t.Fatalf("rank %d with the node's meta, want 0", got)
	}
}

// A unit whose constraint names a service is ranked again when that
// service's nodes change (ServicesAnswer), without a new answer of its
// index; a unit that names another service is not.
func TestServicesAnswerRanksAgain(t *testing.T) {
	withDB := &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "service.db", Operator: schema.OpIsSet}}}
	u := Unit{Name: "cache", Count: 1, MaxPerNode: 1, Placement: withDB}
	m := &machine{t: t, a: New(Config{Node: "me", Seed: 1}), now: t0}
	m.step(UnitsAnswer{Units: []Unit{u}})
	m.step(SessionCreated{ID: "s-me"})
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me", "top"}}})
	m.step(ServicesAnswer{Service: "db", Nodes: map[string]int{"top": 1}})
	if got := rankFor(m, m.step(slots("cache", 10, Slot{K: 0, Released: true}))); got != -1 {
		t.Fatalf("ranked %d while db runs on top only", got)
	}
	if got := rankFor(m, m.step(ServicesAnswer{Service: "other", Nodes: map[string]int{"me": 1}})); got != -1 {
		t.Fatalf("ranked %d on another service's answer", got)
	}
	if got := rankFor(m, m.step(ServicesAnswer{Service: "db", Nodes: map[string]int{"me": 1}})); got != 0 {
		t.Fatalf("rank %d once db runs on me, want 0", got)
	}
}

// The services a unit's placement names, for the executor's watches.
func TestServicesNamed(t *testing.T) {
	c := func(attr string) *schema.Constraint {
		return &schema.Constraint{Attribute: attr, Operator: schema.OpIsSet}
	}
	a := func(attr string) *schema.Affinity {
		return &schema.Affinity{Attribute: attr, Operator: schema.OpIsSet, Weight: 50}
	}
	for _, tc := range []struct {
		name  string
		units []Unit
		want  []string
	}{
		{"none", []Unit{{Name: "web"}}, nil},
		{"node meta only", []Unit{{Name: "web", Placement: &schema.Placement{Constraints: []*schema.Constraint{c("node.meta.zone")}}}}, nil},
		{"a constraint", []Unit{{Name: "web", Placement: &schema.Placement{Constraints: []*schema.Constraint{c("service.db")}}}}, []string{"db"}},
		{"interpolated, an affinity, sorted, once", []Unit{
			{Name: "web", Placement: &schema.Placement{Constraints: []*schema.Constraint{c("${service.redis}"), c("service.db")}}},
			{Name: "api", Placement: &schema.Placement{Affinities: []*schema.Affinity{a("service.db"), a("node.name")}}}}, []string{"db", "redis"}},
		{"an empty name is none", []Unit{{Name: "web", Placement: &schema.Placement{Constraints: []*schema.Constraint{c("service.")}}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ServicesNamed(tc.units); !slices.Equal(got, tc.want) {
				t.Fatalf("ServicesNamed: %q, want %q", got, tc.want)
			}
		})
	}
}
