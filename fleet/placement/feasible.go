package placement

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mariposa-sh/mariposa/schema"
)

// Filter names the test a node failed.
type Filter string

// Filters, in the order Feasible applies them.
const (
	FilterNone       Filter = ""
	FilterPaused     Filter = "paused"
	FilterUnnamed    Filter = "unnamed"
	FilterNotInFleet Filter = "not_in_fleet"
	FilterNotLive    Filter = "not_live"
	FilterDraining   Filter = "draining"
	FilterIneligible Filter = "ineligible"
	FilterConstraint Filter = "constraint"
	FilterMaxPerNode Filter = "max_per_node"
	FilterCapacity   Filter = "capacity"
)

// Verdict is whether a node may hold a slot of a unit, and why not.
type Verdict struct {
	OK     bool
	Filter Filter // FilterNone when OK
	// Constraint is the first constraint the node fails (FilterConstraint).
	Constraint *schema.Constraint
	// Reason is for people: `node.meta.zone = "z3" fails != "z3"
	// (a.hcl:4:3)`, "not live", "max_per_node 1 reached (holds api/0)".
	Reason string
}

var verdictOK = Verdict{OK: true, Reason: "ok"}

// Feasible says whether node n may take slot of unit u: the unit is not
// paused; the node runs the fleet, is live, not draining, eligible; it passes every hard
// constraint; it holds fewer than max_per_node slots of u, not counting
// slot itself; and its free capacity (Capacity.Allocatable less
// View.Reserved, slot's own reservation excluded when the node holds it)
// covers u.Resources (a node of unknown capacity always does). It never panics, whatever the input: an unknown attribute,
// operator, regexp or version constraint fails the node, with the reason.
func Feasible(u Unit, n NodeInfo, slot int, v View) Verdict {
	p := placement(u)
	return feasible(u.Name, &p, u.Resources, n, slot, v.Holders, heldBy(v.Holders, n.Name, slot), v.Reserved, v.Paused, newMatcher())
}

// feasible is Feasible with the slots of the unit n holds other than slot
// (held, ascending) given: a ranker knows them per node without scanning
// every holder for every node.
func feasible(unit string, p *schema.Placement, need Reservation, n NodeInfo, slot int, holders map[int]string, held []int, reserved map[string]Reservation, paused bool, m *matcher) Verdict {
	switch {
	case paused:
		return Verdict{Filter: FilterPaused, Reason: "placement paused"}
	case n.Name == "":
		return Verdict{Filter: FilterUnnamed, Reason: "node has no name"}
	case !n.Fleet:
		return Verdict{Filter: FilterNotInFleet, Reason: "not in the fleet (its mariposa runs without -cluster)"}
	case !n.Live:
		return Verdict{Filter: FilterNotLive, Reason: "not live (mariposa liveness check not passing)"}
	case n.Draining:
		return Verdict{Filter: FilterDraining, Reason: "draining"}
	case !n.Eligible:
		return Verdict{Filter: FilterIneligible, Reason: "not eligible"}
	}
	for _, c := range p.Constraints {
		if c == nil {
			continue
		}
		if ok, why := m.check(n, c.Attribute, c.Operator, c.Value); !ok {
			if c.Pos != "" {
				why += " (" + c.Pos + ")"
			}
			return Verdict{Filter: FilterConstraint, Constraint: c, Reason: why}
		}
	}
	if len(held) >= p.MaxPerNode {
		names := make([]string, len(held))
		for i, k := range held {
			names[i] = unit + "/" + strconv.Itoa(k)
		}
		return Verdict{Filter: FilterMaxPerNode,
			Reason: fmt.Sprintf("max_per_node %d reached (holds %s)", p.MaxPerNode, strings.Join(names, ", "))}
	}
	used := reserved[n.Name]
	if holders[slot] == n.Name && n.Name != "" {
		used = used.Sub(need) // the slot's own reservation is not in the way
	}
	if why := capacityVerdict(need, n.Capacity, used); why != "" {
		return Verdict{Filter: FilterCapacity, Reason: why}
	}
	return verdictOK
}

// heldBy lists, ascending, the slots node holds other than except.
func heldBy(holders map[int]string, node string, except int) []int {
	var held []int
	for k, h := range holders {
		if h == node && h != "" && k != except {
			held = append(held, k)
		}
	}
	sort.Ints(held)
	return held
}
