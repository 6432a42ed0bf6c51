package cluster

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

// planFleet is a Fleet with a view and no Consul: plan is a function of
// that view and now.
func planFleet(me string, nodes []string, slots map[int]slotKV) *Fleet {
	f := NewFleet(FleetConfig{Node: me, Rand: func() float64 { return 0 }})
	f.haveDep, f.haveSl, f.haveNd = true, true, true
	for _, n := range nodes {
		f.nodes = append(f.nodes, NodeInfo{Name: n, Fleet: true, Live: true, Eligible: true})
	}
	f.slots["api"] = slots
	return f
}

func TestPlanTiming(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	unit := func(mod func(*schema.Placement)) map[string]UnitSpec {
		p := &schema.Placement{Count: 1, MaxPerNode: 1, Reschedule: schema.Reschedule{Unlimited: true, Delay: 5 * time.Second,
			DelayFunction: schema.DelayConstant, MaxDelay: time.Minute}}
		if mod != nil {
			mod(p)
		}
		return map[string]UnitSpec{"api": {Unit: Unit{Name: "api", Placement: p}, Services: []*schema.Service{{Name: "api"}}}}
	}
	nodes := []string{"n1", "n2", "n3"}
	// Which node ranks first for api/0 among n1..n3 (rendezvous hash).
	first := Assign(Unit{Name: "api", Placement: &schema.Placement{Count: 1, MaxPerNode: 1}}, []int{0},
		View{Nodes: planFleet("n1", nodes, nil).nodes}, t0)[0][0].Node
	second := Assign(Unit{Name: "api", Placement: &schema.Placement{Count: 1, MaxPerNode: 1}}, []int{0},
		View{Nodes: planFleet("n1", nodes, nil).nodes}, t0)[0][1].Node

	for _, tc := range []struct {
		name  string
		me    string
		units map[string]UnitSpec
		slot  *slotKV
		after time.Duration // plan at t0, then at t0+after
		due   bool          // a claim is due at t0+after
		next  time.Duration // at t0 (0: none)
		storm bool          // the storm brake is engaged
		other *Takeover     // in the takeover log
	}{
		{name: "free, rank 0: at once", me: first, units: unit(nil), due: true},
		{name: "free, rank 1: one step later", me: second, units: unit(nil), next: DefaultStep},
		{name: "free, rank 1, after a step", me: second, units: unit(nil), after: DefaultStep, due: true},
		{name: "released after a reschedule: the policy's delay", me: first, units: unit(nil),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotReleased, Reschedules: []RescheduleEvent{{Node: "n9", At: t0}}}},
			after: 4 * time.Second, next: 5 * time.Second},
		{name: "reschedule delay over", me: first, units: unit(nil),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotReleased, Reschedules: []RescheduleEvent{{Node: "n9", At: t0}}}},
			after: 5 * time.Second, due: true},
		{name: "lost with its node: node_lost_after", me: first,
			units: unit(func(p *schema.Placement) { p.Reschedule.NodeLostAfter = time.Minute }),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotHeld}}, after: 59 * time.Second, next: time.Minute},
		{name: "node_lost_after over", me: first,
			units: unit(func(p *schema.Placement) { p.Reschedule.NodeLostAfter = time.Minute }),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotHeld}}, after: time.Minute, due: true},
		{name: "released, not lost: node_lost_after does not apply", me: first,
			units: unit(func(p *schema.Placement) { p.Reschedule.NodeLostAfter = time.Minute }),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotReleased}}, due: true},
		{name: "lost with its node, brake engaged: never", me: first, units: unit(nil), storm: true,
			slot: &slotKV{value: SlotValue{Node: "n9", State: SlotHeld}}, after: time.Hour},
		{name: "released, brake engaged: at once", me: first, units: unit(nil), storm: true,
			slot: &slotKV{value: SlotValue{Node: "n9", State: SlotReleased}}, due: true},
		{name: "free, brake engaged: at once", me: first, units: unit(nil), storm: true, due: true},
		{name: "lost by this node, brake engaged: at once (not a takeover)", me: first, units: unit(nil), storm: true,
			slot: &slotKV{value: SlotValue{Node: first, State: SlotHeld}}, due: true},
		{name: "lost with its node, budget spent: when the window moves on", me: first, units: unit(nil),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotHeld}},
			other: &Takeover{Slot: "web/0", Node: "n8", From: "n7", At: t0.Add(-2 * time.Second)},
			after: 8 * time.Second, next: 8 * time.Second, due: true},
		{name: "lost with its node, budget spent: not before", me: first, units: unit(nil),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotHeld}},
			other: &Takeover{Slot: "web/0", Node: "n8", From: "n7", At: t0.Add(-2 * time.Second)},
			after: 7 * time.Second},
		{name: "lost with its node, budget spent on the same node: at once", me: first, units: unit(nil),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotHeld}},
			other: &Takeover{Slot: "web/0", Node: "n8", From: "n9", At: t0.Add(-2 * time.Second)},
			due:   true},
		{name: "lost with its node, an old takeover: at once", me: first, units: unit(nil),
			slot:  &slotKV{value: SlotValue{Node: "n9", State: SlotHeld}},
			other: &Takeover{Slot: "web/0", Node: "n8", From: "n7", At: t0.Add(-TakeoverWindow - time.Second)},
			due:   true},
		{name: "failed: never", me: first, units: unit(nil),
			slot: &slotKV{value: SlotValue{State: SlotFailed}}, after: time.Hour},
		{name: "corrupt: never", me: first, units: unit(nil),
			slot: &slotKV{corrupt: errSlotFailed}, after: time.Hour},
		{name: "held by another: never", me: first, units: unit(nil),
			slot: &slotKV{session: "s", value: SlotValue{Node: "n2", State: SlotHeld}}, after: time.Hour},
		{name: "infeasible here: never", me: first,
			units: unit(func(p *schema.Placement) {
				p.Constraints = []*schema.Constraint{{Attribute: "node.name", Operator: "!=", Value: first}}
			}), after: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slots := map[int]slotKV{}
			if tc.slot != nil {
				slots[0] = *tc.slot
			}
			f := planFleet(tc.me, nodes, slots)
			if tc.storm {
				f.storm = &StormRecord{At: t0}
			}
			if tc.other != nil {
				f.takeovers = TakeoverLog{Takeovers: []Takeover{*tc.other}}
			}
			next, due := f.plan(tc.units, t0)
			if tc.after == 0 {
				if (len(due) == 1) != tc.due || next != tc.next {
					t.Fatalf("at t0: due %v, next %v; want due %v, next %v", due, next, tc.due, tc.next)
				}
				return
			}
			if tc.next != 0 && next != tc.next {
				t.Errorf("at t0: next %v, want %v", next, tc.next)
			}
			_, due = f.plan(tc.units, t0.Add(tc.after))
			if (len(due) == 1) != tc.due {
				t.Fatalf("at t0+%v: due %v, want %v", tc.after, due, tc.due)
			}
		})
	}
}

// TestWaiting: what a node's liveness check says about the free slots it
// could run.
func TestWaiting(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	nodes := []string{"n1", "n2", "n3"}
	p := &schema.Placement{Count: 1, MaxPerNode: 1, Reschedule: schema.Reschedule{Unlimited: true, NodeLostAfter: time.Minute}}
	units := map[string]UnitSpec{"api": {Unit: Unit{Name: "api", Placement: p}, Services: []*schema.Service{{Name: "api"}}}}
	ranking := Assign(units["api"].Unit, []int{0}, View{Nodes: planFleet("n1", nodes, nil).nodes}, t0)[0]
	first, second := ranking[0].Node, ranking[1].Node
	lost := &slotKV{value: SlotValue{Node: "n9", State: SlotHeld}}
	for _, tc := range []struct {
		name   string
		me     string
		slot   *slotKV
		storm  bool
		budget bool
		want   string
	}{
		{name: "claiming now: nothing to say", me: first},
		{name: "rank 2", me: second, want: "slot api/0 free; rank 2 of 3, claiming in 200ms"},
		{name: "node_lost_after", me: first, slot: lost,
			want: "slot api/0 lost with n9; rank 1 of 3, after the reschedule delay or node_lost_after, claiming in 1m0s"},
		{name: "storm brake", me: first, storm: true,
			slot: &slotKV{value: SlotValue{Node: "n9", State: SlotHeld, Since: t0.Add(-time.Hour)}},
			want: "slot api/0 lost with n9; rank 1 of 3, takeovers paused by the storm brake (mariposa resume)"},
		{name: "budget", me: first, budget: true,
			slot: &slotKV{value: SlotValue{Node: "n9", State: SlotHeld, Since: t0.Add(-time.Hour)}},
			want: "slot api/0 lost with n9; rank 1 of 3, the takeover budget is spent, claiming in 8s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slots := map[int]slotKV{}
			if tc.slot != nil {
				slots[0] = *tc.slot
			}
			f := planFleet(tc.me, nodes, slots)
			u := units
			if tc.storm || tc.budget {
				// No node_lost_after: the takeover is due at once.
				q := *p
				q.Reschedule.NodeLostAfter = 0
				u = map[string]UnitSpec{"api": {Unit: Unit{Name: "api", Placement: &q}, Services: units["api"].Services}}
			}
			if tc.storm {
				f.storm = &StormRecord{At: t0}
			}
			if tc.budget {
				f.takeovers = TakeoverLog{Takeovers: []Takeover{{Slot: "web/0", From: "n7", At: t0.Add(-2 * time.Second)}}}
			}
			f.plan(u, t0)
			if got := f.Waiting(); got != tc.want {
				t.Errorf("Waiting() = %q\nwant        %q", got, tc.want)
			}
		})
	}
}

// One pass of plan never has this node claim more slots of a unit than
// max_per_node leaves it room for: each slot's ranking assumes the slots
// before it go to their first choice, so a node that is a later choice for
// several (the first choices did not claim them) could otherwise take them
// all at once (seen in the deploy benchmark: 5 slots with max_per_node 4).
func TestPlanKeepsMaxPerNodeWithinAPass(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	units := map[string]UnitSpec{"api": {Unit: Unit{Name: "api", Placement: &schema.Placement{Count: 10, MaxPerNode: 2}},
		Services: []*schema.Service{{Name: "api"}}}}
	f := planFleet("n1", []string{"n1", "n2", "n3", "n4", "n5"}, map[int]slotKV{0: {session: "s", value: SlotValue{Node: "n1", State: SlotHeld}}})
	f.plan(units, t0)
	_, due := f.plan(units, t0.Add(time.Hour)) // every rank's delay over
	if len(due) != 1 {
		var ks []int
		for _, c := range due {
			ks = append(ks, c.k)
		}
		t.Fatalf("n1 holds 1 of max_per_node 2 and plans to claim %v", ks)
	}
}
