package agent

import (
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/schema"
)

// Placement beyond count, exclusive and max_per_node: the agent ranks a
// unit's free slots with cluster.Assign (by AssignRanks) over the inputs
// cluster.Fleet's View has, each from a source that costs a slot change
// nothing more:
//
//   - the unit's placement block and resources (Unit.Placement,
//     Unit.Resources, Unit.Sticky: UnitOf);
//   - each node's attributes and capacity (NodesView.Info: the members'
//     catalog answer, node meta and the registration's meta);
//   - the reschedule penalties (PenaltiesAnswer: the watch on penalty/,
//     which moves only when a penalty is written);
//   - what the nodes' slots reserve (View.Reserved), summed from the
//     index views of the units with resources the agent already has;
//   - for a unit whose volumes keep data on the node (Sticky), each free
//     slot's previous holder (View.Previous): the node its index showed
//     holding it before it was freed, released or lost, as this agent saw
//     it, or as PreviousAnswer says (the last claimer of each slot, read
//     once when the executor starts).
//
// The one View input it leaves out is Load (every unit's slots per node):
// reading it would cost every rank a pass over all slots and take every
// unit off AssignRanks' path by positions; the load score is the last
// tie-breaker before HRW.

// PenaltiesAnswer: a new answer of the watch on penalty/: per unit, per
// node, the end of its reschedule penalty (cluster.ParsePenalties).
type PenaltiesAnswer struct {
	Penalties map[string]map[string]time.Time
}

// PreviousAnswer: the node each slot of Unit was last claimed by (read
// once, for a Sticky unit, from the slots' claimed keys): a free slot's
// previous holder when this agent has not seen it held.
type PreviousAnswer struct {
	Unit     string
	Previous map[int]string
}

// UnitOf is a cluster unit as the agent ranks it: its count, exclusivity
// and max_per_node, its whole placement block, its resources, whether its
// volumes keep data on the node (stickiness, as cluster.Fleet's: for
// "sticky" and "snapshot" handoffs), whether they move with the slot
// (Volumes: a "snapshot" handoff) and how often a holder pushes copies
// (CopyEvery: the least interval of the moving volumes with replicas).
func UnitOf(cu cluster.Unit) Unit {
	u := Unit{Name: cu.Name, Placement: cu.Placement, Resources: cu.Resources, Sticky: cu.HasVolume}
	if p := cu.Placement; p != nil {
		u.Count, u.Exclusive, u.MaxPerNode = max(p.Count, 0), p.Exclusive, p.MaxPerNode
		for _, v := range p.Volumes {
			u.Volumes = u.Volumes || (v != nil && v.Handoff == schema.HandoffSnapshot)
			if v != nil && v.Handoff == schema.HandoffSnapshot && v.Replicas > 0 && v.Interval > 0 && (u.CopyEvery == 0 || v.Interval < u.CopyEvery) {
				u.CopyEvery = v.Interval
			}
		}
	}
	if u.MaxPerNode <= 0 {
		u.MaxPerNode = schema.DefaultMaxPerNode
	}
	return u
}

// clusterUnit is u as cluster.Assign takes it: its placement block with
// the agent's count, exclusivity and max_per_node.
func clusterUnit(u Unit) cluster.Unit {
	var p schema.Placement
	if u.Placement != nil {
		p = *u.Placement
	}
	p.Count, p.MaxPerNode, p.Exclusive = u.Count, u.MaxPerNode, u.Exclusive
	return cluster.Unit{Name: u.Name, Placement: &p, HasVolume: u.Sticky, Resources: u.Resources}
}

// Extra is what a ranking needs beyond the unit, its index view and the
// nodes: cluster.View's Penalties (those running), Previous and Reserved.
// Equal Keys mean equal contents (a memo's key).
type Extra struct {
	Penalties map[string]time.Time
	Previous  map[int]string
	Reserved  map[string]cluster.Reservation
	Key       string
}

// placeState is the agent's side of the inputs above.
type placeState struct {
	pen map[string]map[string]time.Time
	// prev: per Sticky unit, free slots' previous holders.
	prev map[string]map[int]string
	// reserved, for resKey (the views of the units with resources).
	resKey string
	res    map[string]cluster.Reservation
	// resSum names res's contents: views that moved without moving a
	// reservation rank as before (and share a ranking in the simulator).
	resSum string
}

// notePrevious keeps the previous holders of a Sticky unit's slots from
// its index views: a slot seen held and now free keeps the node that held
// it; a slot held again has none.
func (a *Agent) notePrevious(u Unit, old, v *SlotsView) {
	if !u.Sticky {
		return
	}
	prev := a.place.prev[u.Name]
	for k := range prev {
		if v.holder(k) != "" {
			delete(prev, k)
		}
	}
	if old == nil {
		return
	}
	for k, n := range old.nodeOf {
		if n == "" || v.holder(k) != "" {
			continue
		}
		if prev == nil {
			if a.place.prev == nil {
				a.place.prev = map[string]map[int]string{}
			}
			prev = map[int]string{}
			a.place.prev[u.Name] = prev
		}
		prev[k] = n
	}
}

// stepPlace takes the placement inputs; false: in is none of them.
func (a *Agent) stepPlace(in any) bool {
	switch in := in.(type) {
	case PenaltiesAnswer:
		a.place.pen = in.Penalties
		for name := range in.Penalties {
			if _, ok := a.units[name]; ok {
				a.markDirty(name)
			}
		}
	case PreviousAnswer:
		if a.place.prev == nil {
			a.place.prev = map[string]map[int]string{}
		}
		prev := a.place.prev[in.Unit]
		if prev == nil {
			prev = map[int]string{}
			a.place.prev[in.Unit] = prev
		}
		v := a.slots[in.Unit]
		for k, n := range in.Previous {
			if _, seen := prev[k]; !seen && n != "" && (v == nil || v.holder(k) == "") {
				prev[k] = n // what this agent saw itself comes first
			}
		}
		if _, ok := a.units[in.Unit]; ok {
			a.markDirty(in.Unit)
		}
	case NodesAnswer:
		// New attributes or capacity (the members' answer, not a node
		// failing or back): every unit is ranked again, even one whose
		// last ranking gave this node no place.
		if a.nodes != nil && !sameInfo(a.nodes.Info, in.View.Info) {
			for name, r := range a.recs {
				r.hasAsg = false
				if _, ok := a.units[name]; ok {
					a.markDirty(name)
				}
			}
		}
		return false
	default:
		return false
	}
	return true
}

// sameInfo: a and b are the same answer's (the same map), or both none.
func sameInfo(a, b map[string]cluster.NodeInfo) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// extra is Extra for ranking u's free slots at now.
func (a *Agent) extra(u Unit, v *SlotsView, now time.Time) Extra {
	var x Extra
	var key strings.Builder
	if pen := a.place.pen[u.Name]; len(pen) > 0 && !a.cfg.Faults.IgnorePenalties {
		nodes := make([]string, 0, len(pen))
		for n, until := range pen {
			if until.After(now) {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) > 0 {
			slices.Sort(nodes)
			x.Penalties = make(map[string]time.Time, len(nodes))
			key.WriteString("p")
			for _, n := range nodes {
				x.Penalties[n] = pen[n]
				key.WriteString(" " + n + "@" + strconv.FormatInt(pen[n].UnixNano(), 10))
			}
		}
	}
	if prev := a.place.prev[u.Name]; u.Sticky && len(prev) > 0 {
		ks := make([]int, 0, len(prev))
		for k := range prev {
			if v.holder(k) == "" {
				ks = append(ks, k)
			}
		}
		if len(ks) > 0 {
			slices.Sort(ks)
			x.Previous = make(map[int]string, len(ks))
			key.WriteString(";s")
			for _, k := range ks {
				x.Previous[k] = prev[k]
				key.WriteString(" " + strconv.Itoa(k) + "=" + prev[k])
			}
		}
	}
	if !u.Resources.IsZero() {
		x.Reserved = a.reserved()
		key.WriteString(";r " + a.place.resSum)
	}
	x.Key = key.String()
	return x
}

// reserved is View.Reserved: per node, what the slots of the units with
// resources that its index views show it holding reserve (kept while
// those views are the same).
func (a *Agent) reserved() map[string]cluster.Reservation {
	var names []string
	for name, u := range a.units {
		if !u.Resources.IsZero() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var key strings.Builder
	for _, name := range names {
		var idx uint64
		if v := a.slots[name]; v != nil {
			idx = v.Index
		}
		key.WriteString(name + "@" + strconv.FormatUint(idx, 10) + "/" + strconv.Itoa(a.units[name].Resources.CPU) + "/" + strconv.Itoa(a.units[name].Resources.Memory) + " ")
	}
	// This node's own holds its views do not show yet (a claim sent or
	// answered before the index's next answer, which may come only at
	// IdlePace) reserve too: without them, a unit deployed right after
	// another ranks this node as if the other's slot were not here.
	var mine []SlotID
	for id := range a.held {
		if u, ok := a.units[id.Unit]; ok && !u.Resources.IsZero() {
			if v := a.slots[id.Unit]; v == nil || v.holder(id.K) != a.cfg.Node {
				mine = append(mine, id)
			}
		}
	}
	slices.SortFunc(mine, func(x, y SlotID) int {
		if x.Unit != y.Unit {
			return strings.Compare(x.Unit, y.Unit)
		}
		return x.K - y.K
	})
	for _, id := range mine {
		key.WriteString("+" + id.String() + " ")
	}
	if a.place.res != nil && a.place.resKey == key.String() {
		return a.place.res
	}
	res := map[string]cluster.Reservation{}
	for _, name := range names {
		v := a.slots[name]
		if v == nil {
			continue
		}
		need := a.units[name].Resources
		for _, n := range v.nodeOf {
			if n != "" {
				res[n] = res[n].Add(need)
			}
		}
	}
	for _, id := range mine {
		res[a.cfg.Node] = res[a.cfg.Node].Add(a.units[id.Unit].Resources)
	}
	nodes := make([]string, 0, len(res))
	for n := range res {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	h := fnv.New64a()
	for _, n := range nodes {
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", n, res[n].CPU, res[n].Memory)
	}
	a.place.res, a.place.resKey, a.place.resSum = res, key.String(), strconv.FormatUint(h.Sum64(), 16)
	return res
}

// rank ranks u's free slots with the agent's placement inputs.
func (a *Agent) rank(u Unit, v *SlotsView, nodes *NodesView, free []int, x Extra) Ranking {
	if a.cfg.RankWith != nil {
		return a.cfg.RankWith(u, v, nodes, free, x)
	}
	if a.cfg.Rank != nil {
		return a.cfg.Rank(u, v, nodes, free)
	}
	return DefaultRankWith(u, v, nodes, free, x)
}

// DefaultRankWith is cluster.Assign (its ranks alone, by AssignRanks) over
// the unit's placement, its index view, the live nodes with their
// attributes and capacity, and x.
func DefaultRankWith(u Unit, v *SlotsView, nodes *NodesView, free []int, x Extra) Ranking {
	view := cluster.View{Nodes: nodes.infos(), Holders: v.Holders, Penalties: x.Penalties, Previous: x.Previous, Reserved: x.Reserved}
	return Ranking{pos: nodes.positions(), places: cluster.AssignRanks(clusterUnit(u), free, view, time.Time{})}
}
