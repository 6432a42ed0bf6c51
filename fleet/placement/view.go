package placement

import (
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

// NodeInfo is what placement knows of one node, from Consul.
type NodeInfo struct {
	// Name is the Consul node name. A node without a name is never
	// feasible (an empty name means "free" in View.Holders).
	Name            string
	Datacenter      string
	MariposaVersion string
	// Meta is the agent's node_meta.
	Meta map[string]string
	// Fleet: the node's mariposa runs the fleet (mariposa run -cluster,
	// meta fleet = "true"); any other node never takes a slot and counts
	// for nothing in the fleet. Live: the node's mariposa liveness check
	// passes. Eligible: the node accepts new slots. Draining: the node is
	// giving its slots away.
	Fleet, Live, Eligible, Draining bool
	// Services are the Consul services registered on the node, by name:
	// how many instances (the service.<name> attribute).
	Services map[string]int
	// Capacity is what the node offers to slots, from its registration's
	// meta; nil when it publishes none (a mariposa older than capacity
	// placement): not limited, and no capacity score.
	Capacity *Capacity
}

// Unit is a cluster unit: a service with a count, or a group with one.
type Unit struct {
	// Name is the service's or the group's name: slots are Name/0..count-1.
	Name string
	// Placement is the unit's placement; nil means a count of 0.
	Placement *schema.Placement
	// HasVolume: the unit keeps data on the node (volume block), so a slot
	// prefers the node that held it last (the stickiness score).
	HasVolume bool
	// Resources is what each slot reserves on its node: the sum of its
	// services' resources (cpu, memory). Zero: nothing, and capacity plays
	// no part in the unit's placement.
	Resources Reservation
}

// View is one node's picture of the cluster for one unit. Every field may
// be nil or empty. Nodes must have unique names; for a repeated name the
// first entry counts.
type View struct {
	Nodes []NodeInfo
	// Holders maps a slot of the unit to the node holding it; "" or absent:
	// free. Slots at or above the count (being stopped) still count as
	// held on their node.
	Holders map[int]string
	// Previous maps a free slot to the node that held it last, as its
	// released (or lost) value names it (stickiness, for units whose volume
	// says handoff = "sticky" or "snapshot"). cluster's previousHolders builds it.
	Previous map[int]string
	// Penalties maps a node to the end of its reschedule penalty for this
	// unit (penalty/<unit>/<node>).
	Penalties map[string]time.Time
	// Load maps a node to the slots of all units it holds.
	Load map[string]int
	// Reserved maps a node to what the slots of all units it holds
	// reserve (each unit's Resources), like Load.
	Reserved map[string]Reservation
	// Paused: placement of the unit is paused (control/pause).
	Paused bool
}

// placement returns u's placement with the defaults that matter here.
func placement(u Unit) schema.Placement {
	var p schema.Placement
	if u.Placement != nil {
		p = *u.Placement
	}
	if p.Count < 0 {
		p.Count = 0
	}
	if p.MaxPerNode <= 0 {
		p.MaxPerNode = schema.DefaultMaxPerNode
	}
	return p
}
