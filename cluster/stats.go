package cluster

import (
	"slices"
	"sort"
	"time"
)

// FleetStats is a read-only snapshot of what a node's fleet member last
// read and holds: the metrics (metrics) read it at scrape time.
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
	Reschedules []RescheduleEvent
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

// Stats returns a snapshot of the fleet member's view. It only reads.
func (f *Fleet) Stats() FleetStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := FleetStats{Node: f.cfg.Node, Ready: f.haveDep && f.haveSl && f.haveNd, StormBrake: f.storm != nil}
	for _, n := range f.nodes {
		if n.Live {
			st.LiveNodes++
		}
	}
	units := f.unitsLocked()
	names := make([]string, 0, len(units))
	for n := range units {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		u := units[name]
		us := UnitStats{Unit: name, Desired: count(u)}
		for k := 0; k < us.Desired; k++ {
			id := slotName(name, k)
			ss := SlotStats{K: k, State: SlotStatFree}
			s, ok := f.slots[name][k]
			if ok {
				ss.Node = s.value.Node
				ss.Reschedules = slices.Clone(s.value.Reschedules)
			}
			h, mine := f.held[id]
			switch {
			case mine:
				ss.State, ss.Mine, ss.Node = SlotStatHeld, true, f.cfg.Node
				ss.TermIndex = h.term.Index
				ss.Takeover = h.value.Takeover
				if len(h.value.Reschedules) > len(ss.Reschedules) {
					ss.Reschedules = slices.Clone(h.value.Reschedules)
				}
			case ok && s.corrupt != nil:
				ss.State = SlotStatCorrupt
			case ok && s.session != "":
				ss.State = SlotStatHeld
			case ok && s.value.State == SlotFailed:
				ss.State = SlotStatFailed
			case ok && s.value.State == SlotHeld:
				ss.State = SlotStatLost // held, but no session: its node was lost
			}
			if v, ok := f.vacant[id]; ok && (ss.State == SlotStatFree || ss.State == SlotStatLost) {
				ss.VacantSince = v.since
			}
			switch ss.State {
			case SlotStatHeld:
				us.Held++
			case SlotStatFree:
				us.Free++
			case SlotStatLost:
				us.Free++
				us.Lost++
			default:
				us.Failed++
			}
			us.Slots = append(us.Slots, ss)
		}
		st.Units = append(st.Units, us)
	}
	deps := make([]string, 0, len(f.remote))
	for n := range f.remote {
		deps = append(deps, n)
	}
	sort.Strings(deps)
	for _, n := range deps {
		d := f.remote[n]
		ds := DeploymentStats{Name: n, Status: DeployUnknown}
		if d.Spec != nil {
			ds.N = d.Spec.N
			if d.State != nil && d.State.N == d.Spec.N {
				ds.Status = d.State.Status
			}
		}
		st.Deployments = append(st.Deployments, ds)
	}
	for _, p := range f.pauses {
		st.Pauses = append(st.Pauses, p)
	}
	sort.Slice(st.Pauses, func(i, j int) bool { return st.Pauses[i].Unit < st.Pauses[j].Unit })
	st.HeldBack = len(f.holding)
	return st
}
