package sim

import (
	"fmt"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// Placement beyond max_per_node (Config.Placement): node i is in zone
// z(i mod 4) (its node meta), and every eighth node publishes a capacity
// too small for one slot of a unit with resources (the others have room
// for all). Unit i with i mod 5 = 1 is constrained off zone z0, unit i
// with i mod 5 = 3 reserves 500 millicores a slot; a unit keeps its
// placement only when twice its count of nodes allows it, so that a loss
// leaves room for every slot. The invariant: no instance starts on a node
// its unit's placement excludes (placement.Feasible's constraint and
// capacity verdicts, checked at every start: one unit's, not all slots').
// The aggregate (several slots' reservations beyond what a node has) is
// not an invariant: two claims on views that do not show each other may
// both pass (each node decides on its own view); the nodes with room
// here have room for every slot.
type simPlace struct {
	info map[string]placement.NodeInfo
	// feasible: per unit with a placement, the nodes it allows, in order.
	feasible map[string][]*node
}

const (
	smallCPU = 100     // a small node's capacity: less than one slot
	bigCPU   = 1 << 30 // the others'
	slotCPU  = 500
)

func (s *Sim) placeInit() {
	if !s.cfg.Placement {
		return
	}
	p := &simPlace{info: map[string]placement.NodeInfo{}, feasible: map[string][]*node{}}
	for i, n := range s.nodes {
		c := bigCPU
		if i%8 == 7 {
			c = smallCPU
		}
		p.info[n.name] = placement.NodeInfo{Name: n.name, Fleet: true, Live: true, Eligible: true,
			Meta:     map[string]string{"zone": fmt.Sprintf("z%d", i%4)},
			Capacity: &placement.Capacity{Total: placement.Reservation{CPU: c, Memory: bigCPU}}}
	}
	s.plc = p
	for i, u := range s.units {
		switch i % 5 {
		case 1:
			u.Placement = &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "${node.meta.zone}", Operator: "!=", Value: "z0", Pos: "sim"}}}
		case 3:
			u.Resources = placement.Reservation{CPU: slotCPU}
		default:
			continue
		}
		var ok []*node
		for _, n := range s.nodes {
			if p.allows(u, n, 0) == "" {
				ok = append(ok, n)
			}
		}
		if len(ok) < 2*u.Count {
			continue
		}
		p.feasible[u.Name] = ok
		s.units[i] = u
		s.byU[u.Name] = u
	}
}

// allows is "" when u's constraints and capacity allow a slot of it on n,
// else why not.
func (p *simPlace) allows(u agent.Unit, n *node, k int) string {
	pl := &schema.Placement{Count: u.Count, MaxPerNode: u.MaxPerNode}
	if u.Placement != nil {
		pl.Constraints = u.Placement.Constraints
	}
	v := placement.Feasible(placement.Unit{Name: u.Name, Placement: pl, Resources: u.Resources}, p.info[n.name], k, placement.View{})
	if v.OK {
		return ""
	}
	return v.Reason
}

// infos is the nodes' attributes for their view (nil without placement).
func (p *simPlace) infos() map[string]placement.NodeInfo {
	if p == nil {
		return nil
	}
	return p.info
}

// warmNode is the node of slot k of unit i (u) in the placed start.
func (s *Sim) warmNode(i int, u agent.Unit, k int) *node {
	nodes := s.nodes
	if s.plc != nil && s.plc.feasible[u.Name] != nil {
		nodes = s.plc.feasible[u.Name]
	}
	return nodes[(i*u.Count+k)%len(nodes)]
}

// placeCheck: the invariant, at an instance's start.
func (s *Sim) placeCheck(n *node, id agent.SlotID) {
	if s.plc == nil {
		return
	}
	u := s.byU[id.Unit]
	if u.Placement == nil && u.Resources.IsZero() {
		return
	}
	if why := s.plc.allows(u, n, id.K); why != "" {
		s.violate("placement: %s starts on %s, which its unit's placement excludes: %s", id, n.name, why)
	}
}
