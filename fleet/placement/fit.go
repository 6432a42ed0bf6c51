package placement

import (
	"fmt"
	"sort"
	"strings"
)

// Fit is how a unit fits the fleet as it is now, for `mariposa deploy`:
// Unplaceable when no live node passes its node-level constraints (an
// error: nothing would ever run until the fleet changes), Short when the
// feasible nodes cannot hold count instances at max_per_node (a warning:
// the rest stay free). Constraints on service.<name> attributes do not
// make a unit unplaceable, since the services may start with the same
// deployment; they are counted for Short.
//
// Capacity: a node whose allocatable capacity (its capacity less its
// reserve and its node-local services) cannot hold one slot of the unit
// fails with the capacity verdict, so a unit too big for every node is
// Unplaceable. What the slots of other units hold now only shortens the
// room (Short): they may move or stop.
type Fit struct {
	Unit     string
	Live     int // live supervisors that run the fleet
	Feasible int // live fleet nodes passing every hard constraint
	// Capacity is the slots the feasible nodes can hold: max_per_node each,
	// or fewer where the node's free capacity holds fewer.
	Capacity   int
	MaxPerNode int
	// Resources is what one slot reserves.
	Resources   Reservation
	Count       int
	Unplaceable bool
	// Failed lists each live node that fails, with why: "n3: node.meta.zone
	// = "z3" fails != "z3" (a.hcl:4:3)", "n2: needs 256 MiB memory, 120
	// MiB free".
	Failed []string
	// Room lists each feasible node whose free capacity holds fewer than
	// max_per_node slots: "n1: room for 1 (512 MiB memory free, 256 MiB
	// memory each)".
	Room []string
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
		if len(f.Failed) > 0 || len(f.Room) > 0 {
			b.WriteString(":")
		}
	default:
		return ""
	}
	for _, x := range f.Failed {
		b.WriteString("\n  " + x)
	}
	if f.Short() {
		for _, x := range f.Room {
			b.WriteString("\n  " + x)
		}
	}
	return b.String()
}

// FitOf says how u fits nodes (with the services of service.<name>
// attributes filled in, cluster.WithServices), counting only their capacity less
// reserve and node-local services.
func FitOf(u Unit, nodes []NodeInfo) Fit { return FitOfReserved(u, nodes, nil) }

// FitOfReserved is FitOf where the slots of other units already reserve
// reserved (per node) of the nodes' capacity: that lowers the room (Short)
// but never makes the unit Unplaceable.
func FitOfReserved(u Unit, nodes []NodeInfo, reserved map[string]Reservation) Fit {
	p := placement(u)
	f := Fit{Unit: u.Name, Count: p.Count, Resources: u.Resources}
	f.MaxPerNode = max(1, p.MaxPerNode)
	noSvc := p
	noSvc.Constraints = nil
	for _, c := range p.Constraints {
		if c != nil && !strings.HasPrefix(TrimAttr(c.Attribute), AttrServicePrefix) {
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
		if feasible(u.Name, &noSvc, u.Resources, n, 0, nil, nil, nil, false, m).OK {
			nodeLevel++
		}
		if v := feasible(u.Name, &p, u.Resources, n, 0, nil, nil, nil, false, m); v.OK {
			f.Feasible++
			room := roomFor(u.Resources, n.Capacity, reserved[n.Name], f.MaxPerNode)
			f.Capacity += room
			if room < f.MaxPerNode {
				free := n.Capacity.Allocatable().Sub(reserved[n.Name])
				f.Room = append(f.Room, fmt.Sprintf("%s: room for %d (%s free, %s each)", n.Name, room,
					amounts(u.Resources, free), u.Resources))
			}
		} else {
			f.Failed = append(f.Failed, n.Name+": "+oneLine(v.Reason))
		}
	}
	f.Unplaceable = f.Live > 0 && nodeLevel == 0
	return f
}

// roomFor is how many slots reserving need a node of capacity c (nil:
// unknown, not limited) holds beside used, at most most.
func roomFor(need Reservation, c *Capacity, used Reservation, most int) int {
	if c == nil || need.IsZero() {
		return most
	}
	free := c.Allocatable().Sub(used)
	room := most
	if need.CPU > 0 {
		room = min(room, max(free.CPU, 0)/need.CPU)
	}
	if need.Memory > 0 {
		room = min(room, max(free.Memory, 0)/need.Memory)
	}
	return room
}

// amounts prints r for the parts need reserves: "0 millicores cpu, 512
// MiB memory" (negative amounts as 0).
func amounts(need, r Reservation) string {
	var parts []string
	if need.CPU > 0 {
		parts = append(parts, fmt.Sprintf("%d millicores cpu", max(r.CPU, 0)))
	}
	if need.Memory > 0 {
		parts = append(parts, fmt.Sprintf("%d MiB memory", max(r.Memory, 0)))
	}
	return strings.Join(parts, ", ")
}
