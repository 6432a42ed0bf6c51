package command

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/report"
)

// StatusCommand lists mariposa-managed instances from Consul.
type StatusCommand struct {
	UI cli.Ui
	// now replaces time.Now for the SINCE column (tests).
	now func() time.Time
}

func (c *StatusCommand) Synopsis() string { return "Shows the instances mariposa runs, from Consul" }

func (c *StatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa status [options] [SERVICE]

  Lists every instance that mariposa manages, on every node, as Consul sees
  it: node, state, health, version, leader role, since when it is in its
  state, and why (what it waits for, how it last exited). Then, for the units
  deployed to the fleet, each unit's count and its slots: held, free, failed,
  and the node, state and health of the instances in each. With SERVICE, only
  that service's instances and unit (or, for a group's name, its members').
  Works on any system that can reach an agent.

Options:

  -json                   Print JSON: one object with "instances" (one per
                          instance, with the absolute times), "units" (per
                          fleet unit: count, and each slot's state, node and
                          instances) and "problems" (what could not be read).

` + consulFlagsHelp + `
`)
}

// InstanceStatus is one row of mariposa status.
type InstanceStatus struct {
	Service   string    `json:"service"`
	ServiceID string    `json:"service_id"`
	Node      string    `json:"node"`
	Address   string    `json:"address"`
	Port      int       `json:"port"`
	State     string    `json:"state"`  // the report's state (starting | waiting | running | backoff | failed | completed | standby | stopping | stopped), lost, or unknown
	Health    string    `json:"health"` // aggregated status of the service's own checks
	Version   string    `json:"version,omitempty"`
	Leader    string    `json:"leader,omitempty"` // leader | follower | "" (no election)
	Slot      string    `json:"slot,omitempty"`   // "<unit>/<k>" for an instance in a count slot
	Tags      []string  `json:"tags"`
	Since     time.Time `json:"since,omitzero"`      // when it entered State
	Until     time.Time `json:"until,omitzero"`      // backoff: when the next start is due
	PID       int       `json:"pid,omitempty"`       // the running child's PID
	Restarts  int       `json:"restarts"`            // restarts since its mariposa started it
	LastExit  string    `json:"last_exit,omitempty"` // how the last run ended
	Stderr    string    `json:"stderr,omitempty"`    // the child's last line on stderr
	Detail    string    `json:"detail"`              // the supervisor check's human output, whole
}

// StatusOutput is what mariposa status -json prints.
type StatusOutput struct {
	Instances []InstanceStatus `json:"instances"` // never null
	Units     []UnitStatus     `json:"units"`     // never null
	// Problems are what could not be read, by key: corrupt values under
	// mariposa/, or (under "") why the fleet's state could not be read.
	Problems map[string]string `json:"problems,omitempty"`
}

// UnitStatus is one fleet unit (a service or group with count).
type UnitStatus struct {
	Unit      string       `json:"unit"`
	Count     int          `json:"count"`
	Exclusive bool         `json:"exclusive"`
	Held      int          `json:"held"`
	Free      int          `json:"free"`   // free and lost slots
	Failed    int          `json:"failed"` // failed and corrupt slots: nobody claims them until an operator acts
	Slots     []SlotStatus `json:"slots"`  // one per k in 0..count-1
}

// Slot states in UnitStatus.
const (
	slotHeld    = "held"    // a node's session holds the lock
	slotFree    = "free"    // nobody holds it (released, or never claimed)
	slotLost    = "lost"    // its value says held but no session holds it: its node was lost; it awaits takeover
	slotFailed  = "failed"  // reschedules exhausted: mariposa reset UNIT/K
	slotCorrupt = "corrupt" // its value cannot be read: fix or delete the key
)

// SlotStatus is one slot of a unit.
type SlotStatus struct {
	Slot  string `json:"slot"` // "<unit>/<k>"
	Index int    `json:"index"`
	State string `json:"state"` // held | free | lost | failed | corrupt
	// Node is the holder, else the node the slot's value names last (a lost
	// slot's last holder, where a failed one failed).
	Node        string         `json:"node,omitempty"`
	Since       time.Time      `json:"since,omitzero"`
	Reason      string         `json:"reason,omitempty"` // from the value; for corrupt, why it cannot be read
	Reschedules int            `json:"reschedules"`      // reschedules the value records
	Instances   []SlotInstance `json:"instances"`        // never null
}

// SlotInstance is an instance registered in a slot, in brief: the
// InstanceStatus row with the same service_id and node has the rest.
type SlotInstance struct {
	Service   string `json:"service"`
	ServiceID string `json:"service_id"`
	Node      string `json:"node"`
	State     string `json:"state"`
	Health    string `json:"health"`
}

func (c *StatusCommand) Run(args []string) int {
	var cf consulFlags
	var asJSON bool
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.BoolVar(&asJSON, "json", false, "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error("mariposa status: " + err.Error() + "\n\n" + c.Help())
		return 1
	}
	if fs.NArg() > 1 {
		c.UI.Error("mariposa status: at most one SERVICE\n\n" + c.Help())
		return 1
	}
	only := fs.Arg(0)
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa status: " + err.Error())
		return 1
	}
	rows, err := Instances(client, only)
	if err != nil {
		c.UI.Error("mariposa status: " + err.Error())
		return 1
	}
	out := StatusOutput{Units: []UnitStatus{}}
	// The fleet's state needs key:read on mariposa/: without it (or
	// without a fleet) status still lists the instances.
	st, stErr := cluster.ReadState(client)
	if stErr == nil {
		if u, ok := st.Units[only]; ok && only != "" {
			// A group's name: its members' instances.
			for _, svc := range u.Services {
				if svc.Name == only {
					continue
				}
				more, err := Instances(client, svc.Name)
				if err != nil {
					c.UI.Error("mariposa status: " + err.Error())
					return 1
				}
				rows = append(rows, more...)
			}
			sortRows(rows)
		}
		out.Units = unitsStatus(st, rows, only)
		if len(st.Problems) > 0 {
			out.Problems = st.Problems
		}
	} else {
		out.Problems = map[string]string{"": "the fleet's state: " + stErr.Error()}
	}
	out.Instances = rows
	if asJSON {
		b, _ := json.MarshalIndent(out, "", "  ")
		c.UI.Output(string(b))
		return 0
	}
	if len(rows) == 0 {
		c.UI.Output("No instances managed by mariposa.")
	} else {
		now := time.Now()
		if c.now != nil {
			now = c.now()
		}
		c.UI.Output(statusTable(rows, now))
	}
	if len(out.Units) > 0 {
		c.UI.Output("\n" + unitsTable(out.Units))
	}
	return 0
}

// unitMatches: only is "" (every unit), the unit's name, or one of its
// services.
func unitMatches(u cluster.UnitSpec, only string) bool {
	if only == "" || u.Unit.Name == only {
		return true
	}
	for _, svc := range u.Services {
		if svc.Name == only {
			return true
		}
	}
	return false
}

// unitsStatus is the fleet's units (all, or the one that only names or
// that has the service only) as st shows them, sorted by name, with the
// rows registered in each slot. Both -json and the units table are made
// of it.
func unitsStatus(st *cluster.State, rows []InstanceStatus, only string) []UnitStatus {
	bySlot := map[string][]SlotInstance{}
	for _, r := range rows {
		if r.Slot != "" {
			bySlot[r.Slot] = append(bySlot[r.Slot], SlotInstance{Service: r.Service, ServiceID: r.ServiceID,
				Node: r.Node, State: r.State, Health: r.Health})
		}
	}
	names := make([]string, 0, len(st.Units))
	for n := range st.Units {
		names = append(names, n)
	}
	sort.Strings(names)
	units := []UnitStatus{}
	for _, n := range names {
		u := st.Units[n]
		if !unitMatches(u, only) {
			continue
		}
		us := UnitStatus{Unit: n, Slots: []SlotStatus{}}
		if p := u.Unit.Placement; p != nil {
			us.Count, us.Exclusive = p.Count, p.Exclusive
		}
		for k := 0; k < us.Count; k++ {
			s, ok := st.Slots[n][k]
			ss := SlotStatus{Slot: n + "/" + strconv.Itoa(k), Index: k, Node: s.Value.Node, Since: s.Value.Since,
				Reason: s.Value.Reason, Reschedules: len(s.Value.Reschedules)}
			switch {
			case ok && s.Corrupt != "":
				ss.State, ss.Reason = slotCorrupt, s.Corrupt
				us.Failed++
			case ok && s.Session != "":
				ss.State = slotHeld
				us.Held++
			case ok && s.Value.State == cluster.SlotFailed:
				ss.State = slotFailed
				us.Failed++
			case ok && s.Value.State == cluster.SlotHeld:
				ss.State = slotLost
				us.Free++
			default:
				ss.State = slotFree
				us.Free++
			}
			ss.Instances = bySlot[ss.Slot]
			if ss.Instances == nil {
				ss.Instances = []SlotInstance{}
			}
			us.Slots = append(us.Slots, ss)
		}
		units = append(units, us)
	}
	return units
}

// unitsTable summarises the fleet's units: count, slots held, free and
// failed, and each slot in SLOTS: "k:node state/health" for a held slot
// (its instances' state and health, joined by "+" for a group, "@node"
// after an instance on another node than the holder; "held" before any
// registers), "k:node lost" for a lost one, "k:free", "k:failed" and
// "k:corrupt" for the others.
func unitsTable(units []UnitStatus) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UNIT\tCOUNT\tHELD\tFREE\tFAILED\tSLOTS")
	for _, u := range units {
		slots := make([]string, 0, len(u.Slots))
		for _, s := range u.Slots {
			slots = append(slots, slotCell(s))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", u.Unit, u.Count, u.Held, u.Free, u.Failed, dash(strings.Join(slots, ", ")))
	}
	tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// slotCell is one slot in the SLOTS column.
func slotCell(s SlotStatus) string {
	k := strconv.Itoa(s.Index) + ":"
	switch s.State {
	case slotHeld:
		if len(s.Instances) == 0 {
			return k + dash(s.Node) + " held"
		}
		var parts []string
		for _, in := range s.Instances {
			p := in.State + "/" + in.Health
			if in.Node != s.Node {
				p += "@" + in.Node
			}
			parts = append(parts, p)
		}
		return k + dash(s.Node) + " " + strings.Join(parts, "+")
	case slotLost:
		return k + dash(s.Node) + " lost"
	}
	return k + s.State
}

// statusTable renders rows for a terminal. DETAIL is last and never cut: a
// long reason runs on without shifting the other columns.
func statusTable(rows []InstanceStatus, now time.Time) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tNODE\tSTATE\tHEALTH\tVERSION\tLEADER\tSINCE\tDETAIL")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Service, r.Node, r.State, r.Health,
			dash(r.Version), dash(r.Leader), ago(r.Since, now), oneLine(r.Detail))
	}
	tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// Instances reads the mariposa-managed instances (all, or of one service)
// from the catalog, sorted by service and node.
func Instances(client *api.Client, only string) ([]InstanceStatus, error) {
	names := []string{only}
	if only == "" {
		svcs, _, err := client.Catalog().Services(nil)
		if err != nil {
			return nil, err
		}
		names = names[:0]
		for n := range svcs {
			if n != "mariposa" && n != "consul" {
				names = append(names, n)
			}
		}
		sort.Strings(names)
	}
	rows := []InstanceStatus{}
	for _, name := range names {
		entries, _, err := client.Health().Service(name, "", false, nil)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Service.Meta[checks.ManagedByKey] != checks.ManagedByValue {
				continue
			}
			rows = append(rows, instanceRow(e))
		}
	}
	sortRows(rows)
	return rows, nil
}

// sortRows sorts by service, node and service ID.
func sortRows(rows []InstanceStatus) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Service != rows[j].Service {
			return rows[i].Service < rows[j].Service
		}
		if rows[i].Node != rows[j].Node {
			return rows[i].Node < rows[j].Node
		}
		return rows[i].ServiceID < rows[j].ServiceID
	})
}

func instanceRow(e *api.ServiceEntry) InstanceStatus {
	r := InstanceStatus{Service: e.Service.Service, ServiceID: e.Service.ID, Node: e.Node.Node,
		Address: e.Service.Address, Port: e.Service.Port, Version: e.Service.Meta["version"],
		Leader: e.Service.Meta["leader"], Tags: e.Service.Tags, State: "unknown", Health: api.HealthPassing}
	if r.Address == "" {
		r.Address = e.Node.Address
	}
	if r.Tags == nil {
		r.Tags = []string{}
	}
	var own api.HealthChecks
	supervisorDead := false
	for _, hc := range e.Checks {
		switch {
		case hc.CheckID == checks.SupervisorCheckID(e.Service.ID):
			fromSupervisorCheck(&r, hc)
		case hc.CheckID == checks.CheckID(e.Service.ID, checks.AliveCheckName):
			supervisorDead = hc.Status == api.HealthCritical
		case hc.ServiceID == e.Service.ID:
			own = append(own, hc)
		}
	}
	if supervisorDead {
		// What the supervisor check says is stale: nobody reports it.
		r.State, r.Detail = "lost", "the mariposa supervising it is not alive; last said: "+r.Detail
	}
	if len(own) > 0 {
		r.Health = own.AggregatedStatus()
	} else {
		r.Health = "-"
	}
	return r
}

// fromSupervisorCheck fills r from the supervisor check: the state as data
// when the output carries it, else (an older mariposa) read from the prose.
func fromSupervisorCheck(r *InstanceStatus, hc *api.HealthCheck) {
	i, ok := report.Decode(hc.Output)
	if !ok {
		r.Detail = hc.Output
		r.State = stateFrom(hc)
		return
	}
	r.State, r.Detail = i.State, report.Human(hc.Output)
	if r.Detail == "" {
		r.Detail = i.Reason
	}
	r.Since, r.Until, r.PID, r.Restarts, r.LastExit, r.Stderr = i.Since, i.Until, i.PID, i.Restarts, i.LastExit, i.Stderr
	r.Slot = i.Slot
	if i.Role != "" {
		r.Leader = i.Role // fresher than the registration's meta
	}
	if r.Version == "" {
		r.Version = i.Version
	}
}

// stateFrom reads the supervisor check's status and output.
func stateFrom(hc *api.HealthCheck) string {
	out := hc.Output
	switch {
	case hc.Status == api.HealthPassing:
		return "running"
	case strings.HasPrefix(out, "waiting"):
		return "waiting"
	case strings.HasPrefix(out, "restarting"), strings.Contains(out, "; restarting"):
		return "backoff" // the report's name for it
	case strings.HasPrefix(out, "failed"):
		return "failed"
	case strings.HasPrefix(out, "completed"), strings.Contains(out, "not restarted"):
		return "completed"
	case strings.HasPrefix(out, "standby"):
		return "standby"
	case out == "" || strings.HasPrefix(out, "starting"):
		return "starting"
	}
	return "critical"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps the whole text on one table line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), " / ")
}

// ago is a time relative to now, coarse as a person reads it: "12s ago",
// "3m ago", "5h ago", "2d ago"; "-" when unknown.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now" // clocks of different nodes disagree
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}
