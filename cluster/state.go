package cluster

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// State is the fleet as one consistent look at Consul shows it: what the
// commands (status, why) read, with the same parsing the nodes use.
type State struct {
	Units     map[string]UnitSpec
	Slots     map[string]map[int]SlotState
	Nodes     []placement.NodeInfo
	Penalties map[string]map[string]time.Time
	// Deployments are the deployments with their state and progress.
	Deployments []DeploymentStatus
	// Problems are corrupt values found (and skipped), by key.
	Problems map[string]string

	deps  map[string]*Deployment
	slots map[string]map[int]slotKV
}

// SlotState is one slot key as read.
type SlotState struct {
	Value   SlotValue
	Session string // the holder's session; "" when free
	Corrupt string // why the value could not be read, if it could not
	// Status is what the holder says about its current hold (its status
	// key); nil when the slot is not held or its holder said nothing.
	Status *HoldStatus
}

// ReadState reads the fleet's state from Consul.
func ReadState(client *api.Client) (*State, error) {
	q := &api.QueryOptions{RequireConsistent: true}
	st := &State{Problems: map[string]string{}}
	report := func(key, msg string, err error) {
		if err != nil {
			msg += ": " + err.Error()
		}
		st.Problems[key] = msg
	}
	dep, _, err := client.KV().List(DeployPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", DeployPrefix, err)
	}
	deps := parseDeployments(dep, report)
	units, _, err := client.KV().List(UnitsPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", UnitsPrefix, err)
	}
	records, holds := parseUnitKeys(units, report)
	for _, d := range deps {
		d.Records, d.Holds = records, holds
	}
	specs := map[string]*Spec{}
	for n, d := range deps {
		specs[n] = d.Spec
	}
	st.Units = map[string]UnitSpec{}
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, u := range specs[n].Units() {
			if _, dup := st.Units[u.Unit.Name]; !dup {
				st.Units[u.Unit.Name] = u
			}
		}
	}
	// The claimed keys before the slots: a claim between the two reads
	// shows as held, never as lost from its new holder.
	claimed, _, err := client.KV().List(ClaimedPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ClaimedPrefix, err)
	}
	sl, _, err := client.KV().List(SlotsPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", SlotsPrefix, err)
	}
	st.Slots = map[string]map[int]SlotState{}
	slots := parseSlots(sl, report)
	addLost(slots, claimed)
	st.deps, st.slots = deps, slots
	for _, n := range names {
		st.Deployments = append(st.Deployments, statusOf(deps[n], slots, nil))
	}
	for unit, ks := range slots {
		st.Slots[unit] = map[int]SlotState{}
		for k, s := range ks {
			ss := SlotState{Value: s.value, Session: s.session, Status: s.status}
			if s.corrupt != nil {
				ss.Corrupt = s.corrupt.Error()
			}
			st.Slots[unit][k] = ss
		}
	}
	entries, _, err := client.Health().Service("mariposa", "", false, q)
	if err != nil {
		return nil, fmt.Errorf("read the mariposa service: %w", err)
	}
	st.Nodes = parseNodes(entries)
	pen, _, err := client.KV().List(PenaltyPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", PenaltyPrefix, err)
	}
	st.Penalties = parsePenalties(pen)
	ctl, _, err := client.KV().List(ControlPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ControlPrefix, err)
	}
	st.Nodes = markDraining(st.Nodes, parseDrains(ctl, report))
	if st.Nodes, err = withServicesRead(client, st.Nodes, st.Units, q); err != nil {
		return nil, err
	}
	return st, nil
}

// View is the placement view of unit as this state shows it: the same
// builder the nodes use (viewOf), over the slots as Slots shows them.
func (st *State) View(unit string) placement.View {
	slots := make(map[string]map[int]slotKV, len(st.Slots))
	for u, ks := range st.Slots {
		m := make(map[int]slotKV, len(ks))
		for k, s := range ks {
			kv := slotKV{value: s.Value, session: s.Session, status: s.Status}
			if s.Corrupt != "" {
				kv.corrupt = errors.New(s.Corrupt)
			}
			m[k] = kv
		}
		slots[u] = m
	}
	return viewOf(unit, st.Nodes, slots, st.Units, st.Penalties[unit])
}

// Why explains, for each slot of unit, where it is and, for a free one,
// how every node ranks for it (feasibility verdict, score components,
// rank), from this state.
func (st *State) Why(unit string, now time.Time) (string, error) {
	u, ok := st.Units[unit]
	if !ok {
		return "", fmt.Errorf("no deployed unit %q", unit)
	}
	v := st.View(unit)
	out := fmt.Sprintf("%s: count %d, exclusive %v, max_per_node %d\n", unit, count(u), u.Unit.Placement.Exclusive, max(1, u.Unit.Placement.MaxPerNode))
	var free []int
	for k := 0; k < count(u); k++ {
		s, ok := st.Slots[unit][k]
		switch {
		case ok && s.Corrupt != "":
			out += fmt.Sprintf("  slot %d: corrupt value (%s): never claimed until fixed or deleted\n", k, s.Corrupt)
		case ok && s.Session != "":
			out += fmt.Sprintf("  slot %d: held by %s since %s\n", k, s.Value.Node, s.Value.Since.Format(time.RFC3339))
		case ok && s.Value.State == SlotFailed:
			out += fmt.Sprintf("  slot %d: failed (%s); mariposa reset %s/%d clears it\n", k, s.Value.Reason, unit, k)
		default:
			free = append(free, k)
		}
	}
	asg := placement.Assign(u.Unit, free, v, now)
	for _, k := range free {
		out += fmt.Sprintf("  slot %d: free\n", k)
		out += indent(placement.Explain(unit, k, asg[k]), "    ")
	}
	if len(free) == 0 {
		// Where a new slot would go: slot count's ranking.
		out += "  every slot is held; a vacancy in slot 0 would rank the nodes so:\n"
		v0 := v
		v0.Holders = map[int]string{}
		for k, n := range v.Holders {
			if k != 0 {
				v0.Holders[k] = n
			}
		}
		if n := v.Holders[0]; n != "" && !u.Unit.Resources.IsZero() {
			// Vacant, slot 0 reserves nothing on its holder any more.
			v0.Reserved = maps.Clone(v.Reserved)
			v0.Reserved[n] = v0.Reserved[n].Sub(u.Unit.Resources)
		}
		out += indent(placement.Explain(unit, 0, placement.Rank(u.Unit, 0, v0, now)), "    ")
	}
	return out, nil
}

func indent(s, pre string) string {
	out := ""
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out += pre + s[start:i+1]
			start = i + 1
		}
	}
	if start < len(s) {
		out += pre + s[start:] + "\n"
	}
	return out
}

// DeploymentStatus is a deployment as status shows it: its desired spec,
// that spec's state, the stable spec and the progress per unit.
type DeploymentStatus struct {
	Name string `json:"name"`
	N    uint64 `json:"n"`
	Hash string `json:"hash"`
	// Versions are the versions the user gave the spec's units (their
	// services' version attribute), "web 1.4.2, db 2.0"; "" without any.
	Versions string       `json:"versions,omitempty"`
	State    *DeployState `json:"state,omitempty"` // nil: deployed by an older mariposa
	// Stable is the last successful spec, 0 without one.
	Stable   uint64         `json:"stable,omitempty"`
	Progress []UnitProgress `json:"progress"`
}

// Recount counts the deployments' healthy instances again with what live
// says of each held slot's instances now (the catalog's states and checks,
// which status reads): a slot is healthy when its holder said it was
// healthy at the deployment's version in this hold and live says it is
// now, so a count never stays up while an instance is critical.
func (st *State) Recount(live func(unit string, k int, node string) bool) {
	for i, ds := range st.Deployments {
		if d := st.deps[ds.Name]; d != nil {
			st.Deployments[i].Progress = Progress(d, st.slots, live)
		}
	}
}

func statusOf(d *Deployment, slots map[string]map[int]slotKV, live func(string, int, string) bool) DeploymentStatus {
	ds := DeploymentStatus{Name: d.Spec.Name, N: d.Spec.N, Hash: d.Spec.Hash, Versions: specVersions(d.Spec), Progress: Progress(d, slots, live)}
	if d.State != nil && d.State.N == d.Spec.N {
		eff := Effective(*d.State, d.Spec, d.Records)
		ds.State = &eff
	}
	ds.Stable = d.StableN()
	return ds
}

// Line says it in one line: "web: spec 5 (1a2b…) running since …, web 1/6
// healthy (1 canary; waiting for promotion); stable spec 4".
func (ds DeploymentStatus) Line(now time.Time) string {
	out := fmt.Sprintf("%s: spec %d (%s)", ds.Name, ds.N, ds.Hash)
	if ds.Versions != "" {
		out = fmt.Sprintf("%s: spec %d, %s (%s)", ds.Name, ds.N, ds.Versions, ds.Hash)
	}
	st := ds.State
	if st == nil {
		return out + ", deployed by an older mariposa: no progress is tracked"
	}
	out += " " + st.Status
	switch st.Status {
	case DeployRunning:
		out += " for " + now.Sub(st.Started).Round(time.Second).String()
	default:
		out += " " + now.Sub(st.At).Round(time.Second).String() + " ago"
	}
	if st.RevertOf > 0 {
		out += fmt.Sprintf(" (reverts failed spec %d)", st.RevertOf)
	}
	if st.Reason != "" {
		out += ": " + st.Reason
	}
	for _, p := range ds.Progress {
		out += fmt.Sprintf(", %s %d/%d healthy", p.Unit, p.Healthy, p.Count)
		if p.Canaries > 0 && !st.Promoted && st.Status == DeployRunning {
			out += fmt.Sprintf(" (%s; waiting for promotion)", Canaries(p.Canaries))
		}
	}
	if ds.Stable > 0 && ds.Stable != ds.N {
		out += fmt.Sprintf("; stable spec %d", ds.Stable)
	}
	return out
}

// Canaries says "1 canary" or "n canaries".
func Canaries(n int) string {
	if n == 1 {
		return "1 canary"
	}
	return fmt.Sprintf("%d canaries", n)
}

// LostReason is a lost slot's reason in status.
const LostReason = "lost: its node's session was invalidated"

// addLost adds to slots the slots lost with their holders: the step
// machine's sessions have behavior delete (its index entries must go with
// the locks), so an invalidation deletes the slot key; the claimed key,
// never locked, names the last claimer. Such a slot reads as behavior
// release would have left its key: held by that node, no session (status
// says lost and names it).
func addLost(slots map[string]map[int]slotKV, claimed api.KVPairs) {
	for _, p := range claimed {
		rest, ok := strings.CutPrefix(p.Key, ClaimedPrefix)
		i := strings.LastIndexByte(rest, '/')
		if !ok || i <= 0 || len(p.Value) == 0 {
			continue // an older mariposa's claim (no name), or not a claimed key
		}
		unit := rest[:i]
		k, err := strconv.Atoi(rest[i+1:])
		if err != nil || k < 0 {
			continue
		}
		if _, held := slots[unit][k]; held {
			continue
		}
		if slots[unit] == nil {
			slots[unit] = map[int]slotKV{}
		}
		slots[unit][k] = slotKV{value: SlotValue{Node: string(p.Value), State: SlotHeld, Reason: LostReason}}
	}
}
