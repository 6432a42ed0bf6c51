package command

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
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
	// onVerify, when set, sees each check -verify makes (tests: -wait).
	onVerify func(VerifyOutput)
}

func (c *StatusCommand) Synopsis() string { return "Shows the instances mariposa runs, from Consul" }

func (c *StatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa status [options] [SERVICE]
       mariposa status -verify VERSION [options] [NODE...]

  Lists every instance that mariposa manages, on every node, as Consul sees
  it: node, state, health, version, leader role, since when it is in its
  state, and why (what it waits for, how it last exited). Then, for the units
  deployed to the fleet, each unit's count and its slots: held, free, failed,
  and the node, state and health of the instances in each. With SERVICE, only
  that service's instances and unit (or, for a group's name, its members').
  Works on any system that can reach an agent.

  With -verify, checks instead of listing, for a pipeline after a deploy:
  every instance mariposa manages that has a version (on the NODEs given,
  else on every node) must run VERSION, be running and pass all its checks;
  without NODEs, every slot of every deployed unit with a version must be
  held too. A NODE that runs no such instance fails. One line per failure
  and a summary; exit 0 verified, 2 not verified, 1 on a usage or Consul
  error. Flags go before the NODEs.

Options:

  -json                   Print JSON: one object with "instances" (one per
                          instance, with the absolute times), "units" (per
                          fleet unit: count, and each slot's state, node and
                          instances) and "problems" (what could not be read).
                          With -verify: {"version", "verified", "instances",
                          "nodes", "unversioned", "failures"}.

  -verify=VERSION         Verify that everything mariposa runs (or runs on
                          the NODEs) is at VERSION and healthy, as above.

  -service=SERVICE        Only SERVICE's instances and unit, as the SERVICE
                          argument (a service, a group, a group's member):
                          with -verify, where arguments are NODEs.

  -wait=DURATION          With -verify: until verified, check again each time
                          Consul's data changes (blocking queries), for at
                          most DURATION; then the last check stands. Default
                          0: check once.

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
	Health    string    `json:"health"` // aggregated status of the service's own checks; unknown when its node's agent is not alive
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
	Volumes   string    `json:"volumes,omitempty"`   // how the slot's volumes were made ready (a restore: from where, how old)
	Detail    string    `json:"detail"`              // the supervisor check's human output, whole

	// nodeHealth is the aggregated status of its node's checks (serfHealth,
	// node maintenance), "" without any; nodeBad names those not passing.
	// Only -verify reads them.
	nodeHealth, nodeBad string
}

// StatusOutput is what mariposa status -json prints.
type StatusOutput struct {
	Instances []InstanceStatus `json:"instances"` // never null
	Units     []UnitStatus     `json:"units"`     // never null
	// Deployments: each deployment's desired spec, its state (running,
	// successful, failed, cancelled) and progress per unit.
	Deployments []cluster.DeploymentStatus `json:"deployments,omitempty"`
	// Nodes: each fleet node's capacity (cpu millicores, memory MiB: what
	// the host has, the operator's reserve, its own services' share), what
	// the slots it holds reserve, and what is free for more.
	Nodes []cluster.NodeCapacity `json:"nodes,omitempty"`
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
	var version, service string
	var wait time.Duration
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.BoolVar(&asJSON, "json", false, "")
	fs.StringVar(&version, "verify", "", "")
	fs.StringVar(&service, "service", "", "")
	fs.DurationVar(&wait, "wait", 0, "")
	if err := fs.Parse(args); err != nil {
		return c.usage(err.Error())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	verifying := set["verify"]
	switch {
	case verifying && strings.TrimSpace(version) == "":
		return c.usage("-verify needs a VERSION")
	case verifying && strings.HasPrefix(version, "-"):
		return c.usage("-verify needs a VERSION, not " + version)
	case !verifying && set["wait"]:
		return c.usage("-wait goes with -verify")
	case wait < 0:
		return c.usage("-wait must not be negative")
	case !verifying && fs.NArg() > 1:
		return c.usage("at most one SERVICE")
	case !verifying && fs.NArg() == 1 && service != "" && fs.Arg(0) != service:
		return c.usage("give SERVICE or -service, not both")
	}
	only := service
	if !verifying && only == "" {
		only = fs.Arg(0)
	}
	var nodes []string
	if verifying {
		seen := map[string]bool{}
		for _, n := range fs.Args() {
			if strings.HasPrefix(n, "-") {
				return c.usage(fmt.Sprintf("%s after a NODE: flags go before the NODEs", n))
			}
			if !seen[n] {
				seen[n] = true
				nodes = append(nodes, n)
			}
		}
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa status: " + consulErrText(err))
		return 1
	}
	if verifying {
		return c.verify(client, verifyRequest{version: version, only: only, nodes: nodes, wait: wait, asJSON: asJSON})
	}
	d, err := readStatus(client, only, false)
	if err != nil {
		c.UI.Error("mariposa status: " + consulErrText(err))
		return 1
	}
	rows := d.rows
	out := StatusOutput{Units: []UnitStatus{}}
	// The fleet's state needs key:read on mariposa/: without it (or
	// without a fleet) status still lists the instances.
	if d.stErr == nil {
		out.Units = unitsStatus(d.st, rows, only)
		live := liveSlots(d.rows)
		d.st.Recount(func(unit string, k int, node string) bool {
			if u, ok := d.st.Units[unit]; ok && !unitMatches(u, only) {
				return true // its instances were not read: the holder's word stands
			}
			return live(unit, k, node)
		})
		out.Deployments = d.st.Deployments
		if only == "" {
			out.Nodes = d.st.Capacity()
		}
		if len(d.st.Problems) > 0 {
			out.Problems = d.st.Problems
		}
	} else {
		out.Problems = map[string]string{"": "the fleet's state: " + d.stErr.Error()}
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
	if len(out.Nodes) > 0 && reservesCapacity(d.st, out.Nodes) {
		c.UI.Output("\n" + capacityTable(out.Nodes))
	}
	if len(out.Deployments) > 0 && only == "" {
		now := time.Now()
		if c.now != nil {
			now = c.now()
		}
		lines := []string{"Deployments:"}
		for _, ds := range out.Deployments {
			lines = append(lines, "  "+ds.Line(now))
		}
		c.UI.Output("\n" + strings.Join(lines, "\n"))
	}
	return 0
}

// usage reports a wrong invocation: exit 1, as for a Consul error.
func (c *StatusCommand) usage(msg string) int {
	c.UI.Error("mariposa status: " + msg + "\n\n" + c.Help())
	return 1
}

// statusData is one read of what status shows.
type statusData struct {
	rows  []InstanceStatus // sorted
	st    *cluster.State   // nil when stErr is set
	stErr error            // why the fleet's state could not be read
	// index is the index each endpoint read answered at (with watch):
	// status -verify -wait blocks on them for the next change.
	index map[watchKey]uint64
}

// watchKey names an endpoint status reads: the catalog's service list,
// one service's health, or a KV prefix.
type watchKey struct {
	kind string // watchServices | watchHealth | watchKV
	name string
}

const (
	watchServices = "services"
	watchHealth   = "health"
	watchKV       = "kv"
)

// readStatus reads the instances (all, or those of only: a service, a
// group's members) and the fleet's state. With watch, it also reads the
// indexes of the KV prefixes the state comes from, before the state, so
// that a blocking query on them misses no change.
func readStatus(client *api.Client, only string, watch bool) (statusData, error) {
	d := statusData{index: map[watchKey]uint64{}}
	var err error
	d.rows, err = instances(client, only, d.index)
	if err != nil {
		return d, err
	}
	if watch {
		for _, prefix := range []string{cluster.DeployPrefix, cluster.SlotsPrefix, cluster.UnitsPrefix} {
			_, meta, err := client.KV().Keys(prefix, "/", nil)
			if err != nil {
				d.stErr = fmt.Errorf("read %s: %w", prefix, err)
				return d, nil
			}
			d.index[watchKey{watchKV, prefix}] = meta.LastIndex
		}
	}
	d.st, d.stErr = cluster.ReadState(client)
	if d.stErr != nil {
		d.st = nil
		return d, nil
	}
	if u, ok := d.st.Units[only]; ok && only != "" {
		// A group's name: its members' instances.
		for _, svc := range u.Services {
			if svc.Name == only {
				continue
			}
			more, err := instances(client, svc.Name, d.index)
			if err != nil {
				return d, err
			}
			d.rows = append(d.rows, more...)
		}
		sortRows(d.rows)
	}
	return d, nil
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

// liveSlots says, from the catalog's rows, whether slot k of unit has its
// instances registered on node (its holder), every one running and
// passing its checks (or without any): the current fact a deployment's
// healthy count is checked against.
func liveSlots(rows []InstanceStatus) func(unit string, k int, node string) bool {
	bySlot := map[string][]InstanceStatus{}
	for _, r := range rows {
		if r.Slot != "" {
			bySlot[r.Slot] = append(bySlot[r.Slot], r)
		}
	}
	return func(unit string, k int, node string) bool {
		in := bySlot[unit+"/"+strconv.Itoa(k)]
		for _, r := range in {
			if r.Node != node || r.State != "running" || (r.Health != api.HealthPassing && r.Health != "-") {
				return false
			}
		}
		return len(in) > 0
	}
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

// reservesCapacity says whether anything reserves capacity on the fleet: a
// deployed unit with resources, or a node's own services. Otherwise the
// capacity table says nothing placement uses, and is left out (-json has
// the nodes all the same).
func reservesCapacity(st *cluster.State, nodes []cluster.NodeCapacity) bool {
	for _, u := range st.Units {
		if !u.Unit.Resources.IsZero() {
			return true
		}
	}
	for _, n := range nodes {
		if n.Capacity != nil && !n.Capacity.Local.IsZero() {
			return true
		}
	}
	return false
}

// capacityTable is the fleet nodes' capacity: for cpu (millicores) and
// memory (MiB), what is free for more slots, what is reserved (by the
// node's own services and the slots it holds) and what the node offers
// (its capacity less the operator's reserve).
//
//	NODE                       CPU FREE  CPU RESERVED  CPU OFFERED  MEM FREE  MEM RESERVED  MEM OFFERED
//	n1                         1500      500           2000         768 MiB   256 MiB       1024 MiB
//	n2 (no capacity: no limit)  -         -             -            -         -             -
func capacityTable(nodes []cluster.NodeCapacity) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCPU FREE\tCPU RESERVED\tCPU OFFERED\tMEM FREE\tMEM RESERVED\tMEM OFFERED")
	for _, n := range nodes {
		name := n.Node
		if !n.Live {
			name += " (not live)"
		}
		if n.Capacity == nil {
			fmt.Fprintf(tw, "%s (no capacity: no limit)\t-\t-\t-\t-\t-\t-\n", name)
			continue
		}
		c := n.Capacity
		offer := c.Total.Sub(c.Reserve)
		used := c.Local.Add(n.Slots)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d MiB\t%d MiB\t%d MiB\n", name,
			n.Free.CPU, used.CPU, offer.CPU, n.Free.Memory, used.Memory, offer.Memory)
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
	return instances(client, only, nil)
}

// instances is Instances, noting in index (when not nil) the index each
// read answered at.
func instances(client *api.Client, only string, index map[watchKey]uint64) ([]InstanceStatus, error) {
	note := func(k watchKey, meta *api.QueryMeta) {
		if index != nil && meta != nil {
			index[k] = meta.LastIndex
		}
	}
	names := []string{only}
	if only == "" {
		svcs, meta, err := client.Catalog().Services(nil)
		if err != nil {
			return nil, err
		}
		note(watchKey{watchServices, ""}, meta)
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
		entries, meta, err := client.Health().Service(name, "", false, nil)
		if err != nil {
			return nil, err
		}
		note(watchKey{watchHealth, name}, meta)
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
	var own, node api.HealthChecks
	supervisorDead, agentDead := false, false
	for _, hc := range e.Checks {
		switch {
		case hc.ServiceID == "":
			node = append(node, hc)
			agentDead = agentDead || (hc.CheckID == serfHealthCheck && hc.Status == api.HealthCritical)
		case hc.CheckID == checks.SupervisorCheckID(e.Service.ID):
			fromSupervisorCheck(&r, hc)
		case hc.CheckID == checks.CheckID(e.Service.ID, checks.AliveCheckName):
			supervisorDead = hc.Status == api.HealthCritical
		case hc.ServiceID == e.Service.ID:
			own = append(own, hc)
		}
	}
	switch {
	case agentDead:
		// The node's agent is gone: its checks keep the last status they
		// had, which nobody updates any more.
		r.State, r.Detail = "lost", "node "+r.Node+"'s Consul agent is not alive ("+serfHealthCheck+" critical); last said: "+r.Detail
	case supervisorDead:
		// What the supervisor check says is stale: nobody reports it.
		r.State, r.Detail = "lost", "the mariposa supervising it is not alive; last said: "+r.Detail
	}
	switch {
	case agentDead:
		r.Health = "unknown"
	case len(own) > 0:
		r.Health = own.AggregatedStatus()
	default:
		r.Health = "-"
	}
	if len(node) > 0 {
		r.nodeHealth = node.AggregatedStatus()
		var bad []string
		for _, hc := range node {
			if hc.Status != api.HealthPassing {
				bad = append(bad, hc.CheckID)
			}
		}
		r.nodeBad = strings.Join(bad, ", ")
	}
	return r
}

// serfHealthCheck is Consul's check of a node's agent (gossip).
const serfHealthCheck = "serfHealth"

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
	r.Volumes = i.Volumes
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

// VerifyOutput is what mariposa status -verify -json prints.
type VerifyOutput struct {
	Version  string `json:"version"`
	Verified bool   `json:"verified"`
	// Instances is how many instances were checked: those with a version,
	// on the NODEs given (else every node), of SERVICE's unit (else every
	// service); Nodes how many nodes they run on.
	Instances int `json:"instances"`
	Nodes     int `json:"nodes"`
	// Unversioned is how many instances in the same scope have no version:
	// they are not checked.
	Unversioned int             `json:"unversioned"`
	Failures    []VerifyFailure `json:"failures"` // never null
}

// VerifyFailure is one reason status -verify fails. An instance's has its
// service and node (and slot, in one); a slot's its slot (and the node
// that holds it, or lost it); a named node running nothing its node; what
// concerns no one of these (a deployment that cannot be read, nothing to
// verify) only a reason.
type VerifyFailure struct {
	Node    string `json:"node"`
	Service string `json:"service"`
	Slot    string `json:"slot"`
	Reason  string `json:"reason"`
	kind    failureKind
}

type failureKind int

const (
	failInstance failureKind = iota // an instance is not at the version, not running or not healthy
	failSlot                        // a slot is not held, or its instances are missing
	failNode                        // a named node runs nothing to verify
	failFleet                       // the fleet's deployments cannot all be read
	failNothing                     // nothing to verify
)

// Line is the failure as -verify prints it: "api/2 on n3: running 1.4.1,
// want 1.4.2", "api/4: free (no holder)", "n5: runs nothing".
func (f VerifyFailure) Line() string {
	label := f.Node
	switch {
	case f.Slot != "" && f.Service != "" && slotUnit(f.Slot) != f.Service:
		label = f.Service + " (" + f.Slot + ")"
	case f.Slot != "":
		label = f.Slot
	case f.Service != "":
		label = f.Service
	}
	if f.Node != "" && label != f.Node {
		label += " on " + f.Node
	}
	if label == "" {
		return f.Reason
	}
	return label + ": " + f.Reason
}

// slotUnit is the unit of "<unit>/<k>".
func slotUnit(slot string) string {
	if i := strings.LastIndexByte(slot, '/'); i > 0 {
		return slot[:i]
	}
	return slot
}

// Summary is the last line -verify prints.
func (v VerifyOutput) Summary() string {
	note := ""
	if v.Unversioned > 0 {
		note = fmt.Sprintf(" (%s without a version not checked)", nOf(v.Unversioned, "instance"))
	}
	if v.Verified {
		return fmt.Sprintf("verified: %s on %s at %s%s", nOf(v.Instances, "instance"), nOf(v.Nodes, "node"), v.Version, note)
	}
	n := map[failureKind]int{}
	slots := map[string]bool{}
	for _, f := range v.Failures {
		if f.kind == failSlot {
			if slots[f.Slot] {
				continue
			}
			slots[f.Slot] = true
		}
		n[f.kind]++
	}
	var parts []string
	if v.Instances > 0 {
		parts = append(parts, fmt.Sprintf("%d of %s on %s fail", n[failInstance], nOf(v.Instances, "instance"), nOf(v.Nodes, "node")))
	}
	if k := n[failSlot]; k > 0 {
		parts = append(parts, nOf(k, "slot")+map[bool]string{true: " is", false: " are"}[k == 1]+" not converged")
	}
	if k := n[failNode]; k > 0 {
		parts = append(parts, nOf(k, "named node")+map[bool]string{true: " runs", false: " run"}[k == 1]+" nothing")
	}
	if k := n[failFleet]; k > 0 {
		parts = append(parts, nOf(k, "deployment")+" cannot be read")
	}
	if n[failNothing] > 0 {
		parts = append(parts, "nothing to verify")
	}
	return "not verified at " + v.Version + ": " + strings.Join(parts, ", ") + note
}

// nOf is "1 instance", "2 instances".
func nOf(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// verifyRequest is status -verify's arguments.
type verifyRequest struct {
	version string
	only    string   // -service: "" for every service
	nodes   []string // the NODEs, deduplicated: none for every node
	wait    time.Duration
	asJSON  bool
}

// verify runs status -verify: it reads and checks, and with a wait checks
// again on each change Consul reports until verified or the wait is over.
func (c *StatusCommand) verify(client *api.Client, req verifyRequest) int {
	ctx := context.Background()
	if req.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.wait)
		defer cancel()
	}
	var res VerifyOutput
	for first := true; ; first = false {
		d, err := readStatus(client, req.only, req.wait > 0)
		if err == nil && d.stErr != nil {
			err = fmt.Errorf("-verify needs the fleet's state (key:read on %s): %w", cluster.Prefix, d.stErr)
		}
		if err != nil {
			// The command cannot work (no agent, no permission): say so at
			// once. A failed read while waiting (an agent restarting)
			// is tried again each second until the wait is over.
			if first || req.wait == 0 || !sleepCtx(ctx, time.Second) {
				c.UI.Error("mariposa status: " + consulErrText(err))
				return 1
			}
			continue
		}
		res = verify(req.version, d.rows, d.st, req.only, req.nodes)
		if c.onVerify != nil {
			c.onVerify(res)
		}
		if res.Verified || req.wait == 0 || !waitChange(ctx, client, d.index) {
			break
		}
	}
	if req.asJSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		c.UI.Output(string(b))
	} else {
		c.UI.Output(res.Text())
	}
	if !res.Verified {
		return 2
	}
	return 0
}

// Text is -verify's output: a line per failure, then the summary.
func (v VerifyOutput) Text() string {
	var b strings.Builder
	for _, f := range v.Failures {
		b.WriteString(f.Line() + "\n")
	}
	b.WriteString(v.Summary())
	return b.String()
}

// sleepCtx waits d, or until ctx is done: false then.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitChange blocks until one of the endpoints in index answers at another
// index (a blocking query on each, all at once), or a query fails (after a
// second, so that a dead agent is not hammered): true; or until ctx is
// done: false.
func waitChange(ctx context.Context, client *api.Client, index map[watchKey]uint64) bool {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	changed := make(chan struct{}, len(index))
	for k, i := range index {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				q := (&api.QueryOptions{WaitIndex: max(i, 1), WaitTime: 5 * time.Minute}).WithContext(ctx)
				var meta *api.QueryMeta
				var err error
				switch k.kind {
				case watchServices:
					_, meta, err = client.Catalog().Services(q)
				case watchHealth:
					_, meta, err = client.Health().Service(k.name, "", false, q)
				case watchKV:
					_, meta, err = client.KV().Keys(k.name, "/", q)
				}
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					if sleepCtx(ctx, time.Second) {
						changed <- struct{}{}
					}
					return
				case meta.LastIndex != i:
					changed <- struct{}{}
					return
				}
				// The same index: the query's wait ran out; block again.
			}
		}()
	}
	var ok bool
	select {
	case <-changed:
		ok = true
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	return ok
}

// verify checks rows and the fleet's state st against version: every
// instance with a version (on nodes, or on every node without any; of
// only's unit, or of every service without it) must be at version, running
// and healthy, with its node healthy and, in a slot, the slot's holder.
// Without nodes, every slot 0..count-1 of every deployed unit with a
// version (only's, or all) must also be held, with each of its services
// registered on the holder. A named node running no instance with a
// version fails.
func verify(version string, rows []InstanceStatus, st *cluster.State, only string, nodes []string) VerifyOutput {
	out := VerifyOutput{Version: version, Failures: []VerifyFailure{}}
	named := map[string]bool{}
	for _, n := range nodes {
		named[n] = true
	}
	inScope := func(node string) bool { return len(nodes) == 0 || named[node] }
	ofOnly := map[string]bool{only: true} // only and, for a group, its members
	for _, svc := range st.Units[only].Services {
		ofOnly[svc.Name] = true
	}
	onNode := map[string]int{} // instances in scope, with a version or not
	checked := map[string]bool{}
	for _, r := range rows {
		if !inScope(r.Node) || (only != "" && !ofOnly[r.Service]) {
			continue
		}
		onNode[r.Node]++
		if r.Version == "" {
			out.Unversioned++
			continue
		}
		out.Instances++
		checked[r.Node] = true
		if why := instanceFailure(r, version, st); why != "" {
			out.Failures = append(out.Failures, VerifyFailure{Node: r.Node, Service: r.Service, Slot: r.Slot, Reason: why, kind: failInstance})
		}
	}
	out.Nodes = len(checked)

	for _, u := range unitsStatus(st, rows, only) {
		spec := st.Units[u.Unit]
		var members []string // the unit's services to find in each held slot
		for _, svc := range spec.Services {
			if svc.Version != "" && (only == "" || only == u.Unit || only == svc.Name) {
				members = append(members, svc.Name)
			}
		}
		if len(members) == 0 {
			continue // nothing with a version: its instances are not checked either
		}
		for _, s := range u.Slots {
			fail := func(node, service, reason string) {
				// With NODEs, only what a named node holds (or lost).
				if len(nodes) == 0 || (node != "" && named[node]) {
					out.Failures = append(out.Failures, VerifyFailure{Node: node, Service: service, Slot: s.Slot, Reason: reason, kind: failSlot})
				}
			}
			switch s.State {
			case slotHeld:
				for _, m := range members {
					found := false
					for _, in := range s.Instances {
						found = found || (in.Service == m && in.Node == s.Node)
					}
					switch {
					case found:
					case m == u.Unit:
						fail(s.Node, "", "held, no instance registered")
					default:
						fail(s.Node, m, "not registered, though "+s.Node+" holds "+s.Slot)
					}
				}
			case slotLost:
				fail(s.Node, "", "lost: "+s.Node+" was lost, the slot awaits takeover")
			case slotFree:
				fail("", "", "free (no holder)")
			case slotFailed:
				why := "failed"
				if s.Node != "" {
					why += " on " + s.Node
				}
				if s.Reason != "" {
					why += " (" + s.Reason + ")"
				}
				fail("", "", why+"; mariposa reset "+s.Slot+" frees it")
			case slotCorrupt:
				fail("", "", "its value cannot be read: "+s.Reason)
			}
		}
	}

	for _, n := range nodes {
		switch {
		case checked[n]:
		case onNode[n] == 0:
			out.Failures = append(out.Failures, VerifyFailure{Node: n, Reason: "runs nothing", kind: failNode})
		default:
			out.Failures = append(out.Failures, VerifyFailure{Node: n,
				Reason: "runs nothing with a version (" + nOf(onNode[n], "instance") + " without one)", kind: failNode})
		}
	}
	if len(nodes) == 0 {
		keys := make([]string, 0, len(st.Problems))
		for k := range st.Problems {
			if strings.HasPrefix(k, cluster.DeployPrefix) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			out.Failures = append(out.Failures, VerifyFailure{Reason: k + ": " + st.Problems[k], kind: failFleet})
		}
		if len(out.Failures) == 0 && out.Instances == 0 {
			what := "no instance has a version"
			if only != "" {
				what = "no instance of " + only + " has a version"
			}
			out.Failures = append(out.Failures, VerifyFailure{Reason: "nothing to verify: " + what, kind: failNothing})
		}
	}
	out.Verified = len(out.Failures) == 0
	return out
}

// instanceFailure is why r fails verification at version, or "".
func instanceFailure(r InstanceStatus, version string, st *cluster.State) string {
	var bad []string
	if r.Version == version && r.State != "running" {
		s := "state " + r.State
		if d := oneLine(r.Detail); d != "" {
			s += " (" + d + ")"
		}
		bad = append(bad, s)
	}
	if r.Health != api.HealthPassing && r.Health != "-" {
		bad = append(bad, "health "+r.Health)
	}
	if r.nodeHealth != "" && r.nodeHealth != api.HealthPassing {
		bad = append(bad, "node "+r.nodeHealth+" ("+r.nodeBad+")")
	}
	if r.Slot != "" {
		unit, k, err := cluster.ParseSlot(r.Slot)
		u, deployed := st.Units[unit]
		n := 0
		if deployed && u.Unit.Placement != nil {
			n = u.Unit.Placement.Count
		}
		switch {
		case err != nil || !deployed:
			bad = append(bad, "no deployed unit has the slot "+r.Slot)
		case k >= n:
			bad = append(bad, fmt.Sprintf("its slot is past the count (%d)", n))
		default:
			if s := st.Slots[unit][k]; s.Session != "" && s.Value.Node != r.Node {
				bad = append(bad, "its slot is held by "+s.Value.Node)
			}
		}
	}
	if r.Version != version {
		why := fmt.Sprintf("%s %s, want %s", r.State, r.Version, version)
		if len(bad) > 0 {
			why += "; " + strings.Join(bad, ", ")
		}
		return why
	}
	if len(bad) == 0 {
		return ""
	}
	return "version " + version + " but " + strings.Join(bad, ", ")
}
