package placement

import (
	"testing"

	"github.com/mariposa-sh/mariposa/schema"
)

func TestFitOf(t *testing.T) {
	nodes := []NodeInfo{
		{Name: "n1", Fleet: true, Live: true, Eligible: true, Meta: map[string]string{"zone": "z1"}},
		{Name: "n2", Fleet: true, Live: true, Eligible: true, Meta: map[string]string{"zone": "z2"}, Services: map[string]int{"db": 1}},
		{Name: "n3", Fleet: true, Live: true, Eligible: true, Meta: map[string]string{"zone": "z3"}},
		{Name: "n4", Fleet: true, Live: false, Eligible: true, Meta: map[string]string{"zone": "z1"}},
	}
	zone := func(op, v string) *schema.Constraint {
		return &schema.Constraint{Attribute: "node.meta.zone", Operator: op, Value: v, Pos: "a.hcl:4:3"}
	}
	svc := &schema.Constraint{Attribute: "service.db", Operator: "is_set"}
	for _, tc := range []struct {
		name string
		p    schema.Placement
		want string
	}{
		{name: "fits", p: schema.Placement{Count: 3, MaxPerNode: 1}},
		{name: "fits with max_per_node", p: schema.Placement{Count: 4, MaxPerNode: 2, Constraints: []*schema.Constraint{zone("!=", "z3")}}},
		{name: "unplaceable", p: schema.Placement{Count: 1, MaxPerNode: 1, Constraints: []*schema.Constraint{zone("==", "z9")}},
			want: "api: no live node can run it (0 of 3 feasible):\n" +
				"  n1: node.meta.zone = \"z1\" fails == \"z9\" (a.hcl:4:3)\n" +
				"  n2: node.meta.zone = \"z2\" fails == \"z9\" (a.hcl:4:3)\n" +
				"  n3: node.meta.zone = \"z3\" fails == \"z9\" (a.hcl:4:3)"},
		{name: "short", p: schema.Placement{Count: 3, MaxPerNode: 1, Constraints: []*schema.Constraint{zone("!=", "z3")}},
			want: "api: count 3, but 2 of 3 live nodes are feasible at max_per_node 1: room for 2; 1 slot stays free until more nodes qualify:\n" +
				"  n3: node.meta.zone = \"z3\" fails != \"z3\" (a.hcl:4:3)"},
		{name: "a service constraint alone is never unplaceable (it may start with the deployment)",
			p: schema.Placement{Count: 1, MaxPerNode: 1, Constraints: []*schema.Constraint{{Attribute: "service.cache", Operator: "is_set"}}},
			want: "api: count 1, but 0 of 3 live nodes are feasible at max_per_node 1: room for 0; 1 slot stays free until more nodes qualify:\n" +
				"  n1: service.cache not set fails is_set\n  n2: service.cache not set fails is_set\n  n3: service.cache not set fails is_set"},
		{name: "co-located with db: short", p: schema.Placement{Count: 2, MaxPerNode: 1, Constraints: []*schema.Constraint{svc}},
			want: "api: count 2, but 1 of 3 live nodes are feasible at max_per_node 1: room for 1; 1 slot stays free until more nodes qualify:\n" +
				"  n1: service.db not set fails is_set\n  n3: service.db not set fails is_set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			f := FitOf(Unit{Name: "api", Placement: &p}, nodes)
			if got := f.String(); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	if f := FitOf(Unit{Name: "api", Placement: &schema.Placement{Count: 5}}, nil); f.String() != "" || f.Unplaceable {
		t.Errorf("no live node: %+v", f)
	}
}

// A node whose mariposa does not run the fleet (no -cluster) is neither a
// live node nor a feasible one for deploy's fit check.
func TestFitOfNotInFleet(t *testing.T) {
	nodes := []NodeInfo{
		{Name: "a-plain", Live: true, Eligible: true},
		{Name: "n1", Fleet: true, Live: true, Eligible: true},
	}
	f := FitOf(Unit{Name: "api", Placement: &schema.Placement{Count: 2, MaxPerNode: 1}}, nodes)
	if f.Live != 1 || f.Feasible != 1 || f.Capacity != 1 || !f.Short() || len(f.Failed) != 0 {
		t.Errorf("one fleet node, one plain: %+v", f)
	}
	want := "api: count 2, but 1 of 1 live nodes are feasible at max_per_node 1: room for 1; 1 slot stays free until more nodes qualify"
	if got := f.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// Only plain nodes: no live fleet node at all.
	if f := FitOf(Unit{Name: "api", Placement: &schema.Placement{Count: 1}}, nodes[:1]); f.Live != 0 || f.Unplaceable {
		t.Errorf("only a plain node: %+v", f)
	}
}
