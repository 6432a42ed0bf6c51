package cluster

import (
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// FleetStats is a read-only snapshot of what a node's fleet member (the
// step machine: fleet/executor's Stats) last read and holds: the metrics
// (metrics) read it at scrape time.
// It costs no Consul request.
type FleetStats struct {
	// Node is this node's name.
	Node string
	// Ready: the deployed units, the slots and the supervisors have each
	// been read once; before that the counts below say nothing.
	Ready bool
	// LiveNodes is how many supervisors that run the fleet are live, as
	// last read.
	LiveNodes int
	// StormBrake: the storm brake is engaged (control/storm exists).
	StormBrake bool
	// Units is every unit this node knows (deployed or in its files), by
	// name.
	Units []UnitStats
	// Deployments is every deployment, by name.
	Deployments []DeploymentStats
	// Pauses are the pauses in effect (mariposa pause), by unit ("" for
	// the whole fleet first); HeldBack is how many automatic actions this
	// node holds back because of them (its queue).
	Pauses   []PauseRecord
	HeldBack int
}

// UnitStats is one unit's slots as this node last read them.
type UnitStats struct {
	Unit string
	// Desired is the unit's count.
	Desired int
	// Held: a node's session holds the slot. Free: nobody holds it
	// (released, never claimed, or lost with its node and awaiting
	// takeover). Failed: failed (reschedules exhausted) or corrupt: nobody
	// claims it until an operator acts. Lost counts the free slots lost
	// with their node.
	Held, Free, Failed, Lost int
	// Slots is each slot 0..Desired-1.
	Slots []SlotStats
}

// SlotStats is one slot.
type SlotStats struct {
	K int
	// State is held, free, lost, failed or corrupt.
	State string
	// Node is the node its value names (the holder, or the last one).
	Node string
	// Mine: this node holds it; TermIndex is then its fencing token, and
	// Takeover says the claim took it over from a lost node.
	Mine      bool
	TermIndex uint64
	Takeover  bool
	// VacantSince is when this node first saw it free, for a free or
	// lost slot it plans claims for (zero otherwise).
	VacantSince time.Time
	// Reschedules is the slot's reschedule tracker (its last events).
	Reschedules []placement.RescheduleEvent
}

// Slot states in SlotStats.
const (
	SlotStatHeld    = "held"
	SlotStatFree    = "free"
	SlotStatLost    = "lost"
	SlotStatFailed  = "failed"
	SlotStatCorrupt = "corrupt"
)

// DeploymentStats is one deployment's status.
type DeploymentStats struct {
	Name string
	// N is its desired spec's number.
	N uint64
	// Status is that spec's state: running, successful, failed or
	// cancelled; "unknown" when it has none (deployed by an older
	// mariposa, or its state is not read yet).
	Status string
}

// DeployUnknown is a DeploymentStats status without a state.
const DeployUnknown = "unknown"
