package placement

import (
	"fmt"
	"testing"

	"github.com/mariposa-sh/mariposa/schema"
)

// BenchmarkAssign: 100 nodes, 100 slots of which half are free.
func BenchmarkAssign(b *testing.B) {
	var v View
	v.Holders, v.Load = map[int]string{}, map[string]int{}
	for i := range 100 {
		n := node(fmt.Sprintf("n%03d", i), fmt.Sprintf("zone=z%d", i%3), "disk=ssd")
		v.Nodes = append(v.Nodes, n)
		v.Load[n.Name] = i % 7
	}
	var free []int
	for k := range 100 {
		if k%2 == 0 {
			v.Holders[k] = v.Nodes[k].Name
		} else {
			free = append(free, k)
		}
	}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 100,
		Constraints: []*schema.Constraint{{Attribute: "node.meta.zone", Operator: "regexp", Value: "^z[0-9]$"}},
		Affinities:  []*schema.Affinity{{Attribute: "node.meta.disk", Operator: "==~", Value: "ssd"}},
		Spreads:     []*schema.Spread{{Attribute: "node.meta.zone"}}}}
	b.ReportAllocs()
	for b.Loop() {
		Assign(u, free, v, t0)
	}
}
