package cluster

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
)

// Fit is how a unit fits the fleet as it is now, for `mariposa deploy`:
// Unplaceable when no live node passes its node-level constraints (an
// error: nothing would ever run until the fleet changes), Short when the
// feasible nodes cannot hold count instances at max_per_node (a warning:
// the rest stay free). Constraints on service.<name> attributes do not
// make a unit unplaceable, since the services may start with the same
// deployment; they are counted for Short.
type Fit struct {
	Unit        string
	Live        int // live supervisors that run the fleet
	Feasible    int // live fleet nodes passing every hard constraint
	Capacity    int // Feasible × max_per_node
	MaxPerNode  int
	Count       int
	Unplaceable bool
	// Failed lists each live node that fails, with why: "n3: node.meta.zone
	// = "z3" fails != "z3" (a.hcl:4:3)".
	Failed []string
}

// Short says whether count exceeds what the feasible nodes can hold.
func (f Fit) Short() bool { return !f.Unplaceable && f.Live > 0 && f.Count > f.Capacity }

// String is the fit for people; "" when the unit fits.
func (f Fit) String() string {
	var b strings.Builder
	switch {
	case f.Live == 0:
		return ""
	case f.Unplaceable:
		fmt.Fprintf(&b, "%s: no live node can run it (0 of %d feasible):", f.Unit, f.Live)
	case f.Short():
		left := "1 slot stays"
		if n := f.Count - f.Capacity; n != 1 {
			left = fmt.Sprintf("%d slots stay", n)
		}
		fmt.Fprintf(&b, "%s: count %d, but %d of %d live nodes are feasible at max_per_node %d: room for %d; %s free until more nodes qualify",
			f.Unit, f.Count, f.Feasible, f.Live, f.MaxPerNode, f.Capacity, left)
		if len(f.Failed) > 0 {
			b.WriteString(":")
		}
	default:
		return ""
	}
	for _, x := range f.Failed {
		b.WriteString("\n  " + x)
	}
	return b.String()
}

// FitOf says how u fits nodes (with the services of service.<name>
// attributes filled in, withServices).
func FitOf(u Unit, nodes []NodeInfo) Fit {
	p := placement(u)
	f := Fit{Unit: u.Name, Count: p.Count}
	noSvc := p
	noSvc.Constraints = nil
	for _, c := range p.Constraints {
		if c != nil && !strings.HasPrefix(trimAttr(c.Attribute), AttrServicePrefix) {
			noSvc.Constraints = append(noSvc.Constraints, c)
		}
	}
	sorted := append([]NodeInfo(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	nodeLevel := 0
	m := newMatcher()
	for _, n := range sorted {
		if !n.Live || !n.Fleet {
			continue // a node that does not run the fleet never runs it
		}
		f.Live++
		if feasible(u.Name, &noSvc, n, 0, nil, false, m).OK {
			nodeLevel++
		}
		if v := feasible(u.Name, &p, n, 0, nil, false, m); v.OK {
			f.Feasible++
		} else {
			f.Failed = append(f.Failed, n.Name+": "+oneLine(v.Reason))
		}
	}
	f.MaxPerNode = max(1, p.MaxPerNode)
	f.Capacity = f.Feasible * f.MaxPerNode
	f.Unplaceable = f.Live > 0 && nodeLevel == 0
	return f
}

// FitSpec reads the live supervisors (and the services the spec's
// constraints name) and says how each unit of spec fits.
func FitSpec(client *api.Client, spec *Spec) ([]Fit, error) {
	q := &api.QueryOptions{RequireConsistent: true}
	entries, _, err := client.Health().Service("mariposa", "", false, q)
	if err != nil {
		return nil, fmt.Errorf("read the mariposa service: %w", err)
	}
	nodes := parseNodes(entries)
	units := map[string]UnitSpec{}
	for _, u := range spec.Units() {
		units[u.Unit.Name] = u
	}
	if nodes, err = withServicesRead(client, nodes, units, q); err != nil {
		return nil, err
	}
	var out []Fit
	for _, u := range spec.Units() {
		out = append(out, FitOf(u.Unit, nodes))
	}
	return out, nil
}
