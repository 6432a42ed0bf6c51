package command

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
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
  state, and why (what it waits for, how it last exited). With SERVICE, only
  that service's instances. Works on any system that can reach an agent.

Options:

  -json                   Print JSON: one object per instance, with the
                          absolute times.

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
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa status: " + err.Error())
		return 1
	}
	rows, err := Instances(client, fs.Arg(0))
	if err != nil {
		c.UI.Error("mariposa status: " + err.Error())
		return 1
	}
	if asJSON {
		b, _ := json.MarshalIndent(rows, "", "  ")
		c.UI.Output(string(b))
		return 0
	}
	if len(rows) == 0 {
		c.UI.Output("No instances managed by mariposa.")
		return 0
	}
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	c.UI.Output(statusTable(rows, now))
	if st, err := cluster.ReadState(client); err == nil && len(st.Units) > 0 {
		c.UI.Output("\n" + unitsTable(st, fs.Arg(0)))
	}
	return 0
}

// unitsTable summarises the fleet's units: count, and slots held, free and
// failed, with the node of each held slot.
func unitsTable(st *cluster.State, only string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UNIT	COUNT	HELD	FREE	FAILED	NODES")
	names := make([]string, 0, len(st.Units))
	for n := range st.Units {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if only != "" && n != only {
			continue
		}
		u := st.Units[n]
		held, free, failed := 0, 0, 0
		var nodes []string
		for k := 0; k < u.Unit.Placement.Count; k++ {
			s := st.Slots[n][k]
			switch {
			case s.Session != "":
				held++
				nodes = append(nodes, fmt.Sprintf("%d:%s", k, s.Value.Node))
			case s.Value.State == cluster.SlotFailed:
				failed++
			default:
				free++
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", n, u.Unit.Placement.Count, held, free, failed, dash(strings.Join(nodes, " ")))
	}
	tw.Flush()
	return strings.TrimRight(b.String(), "\n")
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
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Service != rows[j].Service {
			return rows[i].Service < rows[j].Service
		}
		return rows[i].Node < rows[j].Node
	})
	return rows, nil
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
