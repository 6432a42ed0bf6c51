package agent

import (
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// Placement beyond count, exclusive and max_per_node: the agent ranks a
// unit's free slots with placement.Assign (by AssignRanks) over the inputs
// of a placement.View, each from a source that costs a slot change nothing
// more:
//
//   - the unit's placement block and resources (Unit.Placement,
//     Unit.Resources, Unit.Sticky: UnitOf);
//   - each node's attributes and capacity (NodesView.Info: the members'
//     catalog answer, node meta and the registration's meta);
//   - the reschedule penalties (PenaltiesAnswer: the watch on penalty/,
//     which moves only when a penalty is written);
//   - what the nodes' slots reserve (View.Reserved), summed from the
//     index views of the units with resources the agent already has;
//   - for a unit whose constraints or affinities name service.<name>
//     attributes, the nodes each such service runs on (NodeInfo.Services:
//     ServicesAnswer, one watch per service named, which moves only when
//     that service's instances do); such a unit claims nothing before
//     every service it names has answered once, so that no ranking lacks
//     them (an anti-affinity, a not_set constraint, would otherwise place
//     on the very nodes they exclude);
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

// ServicesAnswer: a new answer of the watch on a service that a unit's
// placement names (service.<name>): its instances per node, every
// instance counted, passing or not (cluster.ServiceCounts).
type ServicesAnswer struct {
	Service string
	Nodes   map[string]int
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
// volumes keep data on the node (stickiness, fleet/placement/score.go: for
// "sticky" and "snapshot" handoffs), whether they move with the slot
// (Volumes: a "snapshot" handoff) and how often a holder pushes copies
// (CopyEvery: the least interval of the moving volumes with replicas).
func UnitOf(cu placement.Unit) Unit {
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

// clusterUnit is u as placement.Assign takes it: its placement block with
// the agent's count, exclusivity and max_per_node.
func clusterUnit(u Unit) placement.Unit {
	var p schema.Placement
	if u.Placement != nil {
		p = *u.Placement
	}
	p.Count, p.MaxPerNode, p.Exclusive = u.Count, u.MaxPerNode, u.Exclusive
	return placement.Unit{Name: u.Name, Placement: &p, HasVolume: u.Sticky, Resources: u.Resources}
}

// Extra is what a ranking needs beyond the unit, its index view and the
// nodes: placement.View's Penalties (those running), Previous and Reserved,
// and the nodes of the services the unit's placement names (Services: per
// service, per node, its instances; NodeInfo.Services). Equal Keys mean
// equal contents (a memo's key).
type Extra struct {
	Penalties map[string]time.Time
	Previous  map[int]string
	Reserved  map[string]placement.Reservation
	Services  map[string]map[string]int
	Key       string
}

// placeState is the agent's side of the inputs above.
type placeState struct {
	pen map[string]map[string]time.Time
	// prev: per Sticky unit, free slots' previous holders.
	prev map[string]map[int]string
	// reserved, for resKey (the views of the units with resources).
	resKey string
	res    map[string]placement.Reservation
	// resSum names res's contents: views that moved without moving a
	// reservation rank as before (and share a ranking in the simulator).
	resSum string
	// svc: per service a unit's placement names, its instances per node
	// (the last ServicesAnswer; a service missing: not heard yet), and
	// svcGen, moved by every answer that changed it (Extra.Key).
	svc    map[string]map[string]int
	svcGen map[string]uint64
	// named: per unit, the services its placement names
	// (cluster.ServicesNamed), for that placement block.
	named map[string]namedServices
}

// namedServices caches cluster.ServicesNamed of one placement block.
type namedServices struct {
	p     *schema.Placement
	names []string
}

// servicesNamed are the services u's placement names by service.<name>
// attributes (kept while its placement block is the same).
func (a *Agent) servicesNamed(u Unit) []string {
	if u.Placement == nil {
		return nil
	}
	if c, ok := a.place.named[u.Name]; ok && c.p == u.Placement {
		return c.names
	}
	if a.place.named == nil {
		a.place.named = map[string]namedServices{}
	}
	names := cluster.ServicesNamed(u.Placement)
	a.place.named[u.Name] = namedServices{p: u.Placement, names: names}
	return names
}

// ServicesNamed lists, sorted and once each, the services the units'
// placements name by service.<name> attributes: those the executor
// watches (ServicesAnswer).
func ServicesNamed(units []Unit) []string {
	var out []string
	for _, u := range units {
		out = append(out, cluster.ServicesNamed(u.Placement)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// servicesHeard: every service u's placement names has answered once
// (until then u claims nothing; its first ranking has them all).
func (a *Agent) servicesHeard(u Unit) bool {
	for _, name := range a.servicesNamed(u) {
		if _, ok := a.place.svc[name]; !ok {
			return false
		}
	}
	return true
}

// servicesAnswer takes a service's nodes; the units that name it are
// ranked again when they changed.
func (a *Agent) servicesAnswer(in ServicesAnswer) {
	if old, ok := a.place.svc[in.Service]; ok && maps.Equal(old, in.Nodes) {
		return
	}
	if a.place.svc == nil {
		a.place.svc, a.place.svcGen = map[string]map[string]int{}, map[string]uint64{}
	}
	nodes := in.Nodes
	if nodes == nil {
		nodes = map[string]int{} // heard: none
	}
	a.place.svc[in.Service] = nodes
	a.place.svcGen[in.Service]++
	for name, u := range a.units {
		if slices.Contains(a.servicesNamed(u), in.Service) {
			a.markDirty(name)
		}
	}
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
	case ServicesAnswer:
		a.servicesAnswer(in)
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
	case UnitsAnswer:
		// A service no unit names any more is forgotten: named again,
		// its watch starts again and the units wait for its answer.
		if len(a.place.svc) > 0 {
			named := ServicesNamed(in.Units)
			for name := range a.place.svc {
				if _, found := slices.BinarySearch(named, name); !found {
					delete(a.place.svc, name)
				}
			}
		}
		return false
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
func sameInfo(a, b map[string]placement.NodeInfo) bool {
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
	if names := a.servicesNamed(u); len(names) > 0 {
		x.Services = make(map[string]map[string]int, len(names))
		key.WriteString(";v")
		for _, name := range names {
			x.Services[name] = a.place.svc[name]
			key.WriteString(" " + name + "@" + strconv.FormatUint(a.place.svcGen[name], 10))
		}
	}
	x.Key = key.String()
	return x
}

// reserved is View.Reserved: per node, what the slots of the units with
// resources that its index views show it holding reserve (kept while
// those views are the same).
func (a *Agent) reserved() map[string]placement.Reservation {
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
	res := map[string]placement.Reservation{}
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

// DefaultRankWith is placement.Assign (its ranks alone, by AssignRanks) over
// the unit's placement, its index view, the live nodes with their
// attributes and capacity, and x.
func DefaultRankWith(u Unit, v *SlotsView, nodes *NodesView, free []int, x Extra) Ranking {
	infos := nodes.infos()
	if len(x.Services) > 0 {
		infos = cluster.WithServices(infos, x.Services) // a copy: the view's are shared
	}
	view := placement.View{Nodes: infos, Holders: v.Holders, Penalties: x.Penalties, Previous: x.Previous, Reserved: x.Reserved}
	return Ranking{pos: nodes.positions(), places: placement.AssignRanks(clusterUnit(u), free, view, time.Time{})}
}
