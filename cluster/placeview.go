// The placement view of a unit from the KV layout as read: what status
// and why rank with (State.View, State.Capacity).

package cluster

import (
	"sort"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// viewOf is the placement view of unit from the slot keys as read (every
// unit's: load and reservations count them all), the units' specs, the
// nodes as placement sees them and the unit's penalties: the builder
// behind status/why (State.View). The step machine builds its View from
// its own watches (fleet/agent/place.go), with the same placement
// functions, so what `mariposa why` shows is what the nodes rank.
func viewOf(unit string, nodes []placement.NodeInfo, slots map[string]map[int]slotKV, units map[string]UnitSpec, penalties map[string]time.Time) placement.View {
	v := placement.View{Nodes: nodes, Holders: map[int]string{}, Penalties: penalties, Load: map[string]int{},
		Previous: previousHolders(slots[unit]), Reserved: reservedBy(slots, units)}
	for u, ks := range slots {
		for k, s := range ks {
			if s.session == "" {
				continue
			}
			v.Load[s.value.Node]++
			if u == unit && s.corrupt == nil {
				v.Holders[k] = s.value.Node
			}
		}
	}
	return v
}

// previousHolders is View.Previous from a unit's slot keys: for each slot
// nobody holds, the node its value names (the node that released it, or
// that held it when it was lost). A held, failed or corrupt slot, or one
// never claimed, has none.
func previousHolders(slots map[int]slotKV) map[int]string {
	out := map[int]string{}
	for k, s := range slots {
		if n := lastHolder(s.value, s.session); n != "" && s.corrupt == nil {
			out[k] = n
		}
	}
	return out
}

// lastHolder is the node a free slot's value names as its last holder, ""
// when the slot is held, failed (nobody claims it) or names none.
func lastHolder(v SlotValue, session string) string {
	if session != "" || v.State == SlotFailed {
		return ""
	}
	return v.Node
}

// reservedBy is View.Reserved from slot keys: per node, what the slots it
// holds (every unit's) reserve, each as units says (a unit not in units
// reserves nothing).
func reservedBy(slots map[string]map[int]slotKV, units map[string]UnitSpec) map[string]placement.Reservation {
	out := map[string]placement.Reservation{}
	for name, ks := range slots {
		u, ok := units[name]
		if !ok || u.Unit.Resources.IsZero() {
			continue
		}
		for _, s := range ks {
			if s.session != "" && s.value.Node != "" {
				out[s.value.Node] = out[s.value.Node].Add(u.Unit.Resources)
			}
		}
	}
	return out
}

// NodeCapacity is one fleet node's capacity and what is reserved of it,
// for `mariposa status`.
type NodeCapacity struct {
	Node string `json:"node"`
	Live bool   `json:"live"`
	// Capacity is nil when the node publishes none (a mariposa older than
	// capacity placement): not limited.
	Capacity *placement.Capacity `json:"capacity,omitempty"`
	// Slots is what the slots the node holds reserve (every unit's).
	Slots placement.Reservation `json:"slots"`
	// Free is Capacity.Allocatable() − Slots (negative when overcommitted);
	// zero when Capacity is nil.
	Free placement.Reservation `json:"free"`
}

// Capacity lists the fleet nodes, by name, with their capacity, what the
// slots they hold reserve (as the deployed units say) and what is free.
func (st *State) Capacity() []NodeCapacity {
	reserved := map[string]placement.Reservation{}
	for unit, ks := range st.Slots {
		u, ok := st.Units[unit]
		if !ok {
			continue
		}
		for _, s := range ks {
			if s.Session != "" && s.Value.Node != "" {
				reserved[s.Value.Node] = reserved[s.Value.Node].Add(u.Unit.Resources)
			}
		}
	}
	nodes := FleetNodes(st.Nodes)
	sortNodes(nodes)
	var out []NodeCapacity
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		nc := NodeCapacity{Node: n.Name, Live: n.Live, Capacity: n.Capacity, Slots: reserved[n.Name]}
		if n.Capacity != nil {
			nc.Free = n.Capacity.Allocatable().Sub(nc.Slots)
		}
		out = append(out, nc)
	}
	return out
}

// sortNodes sorts nodes by name, as placement's rankings do.
func sortNodes(ns []placement.NodeInfo) {
	sort.SliceStable(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
}
