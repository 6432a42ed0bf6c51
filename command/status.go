package command

import (
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/checks"
)

// StatusCommand lists mariposa-managed instances from Consul.
type StatusCommand struct {
	UI cli.Ui
}

func (c *StatusCommand) Synopsis() string { return "Shows the instances mariposa runs, from Consul" }

func (c *StatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa status [options] [SERVICE]

  Lists every instance that mariposa manages, on every node, as Consul sees
  it: node, state, health, version, leader role, and what it waits for. With
  SERVICE, only that service's instances.

Options:

  -consul-addr=ADDR   Consul HTTP API address (default $CONSUL_HTTP_ADDR or
                      127.0.0.1:8500).
  -token=TOKEN        ACL token (default $CONSUL_HTTP_TOKEN).
  -json               Print JSON.
`)
}

// InstanceStatus is one row of mariposa status.
type InstanceStatus struct {
	Service   string   `json:"service"`
	ServiceID string   `json:"service_id"`
	Node      string   `json:"node"`
	Address   string   `json:"address"`
	Port      int      `json:"port"`
	State     string   `json:"state"`  // running | waiting | restarting | failed | completed | starting | standby | lost | unknown
	Health    string   `json:"health"` // aggregated status of the service's own checks
	Version   string   `json:"version,omitempty"`
	Leader    string   `json:"leader,omitempty"` // leader | follower | "" (no election)
	Tags      []string `json:"tags"`
	Detail    string   `json:"detail"` // the supervisor check's output
}

func (c *StatusCommand) Run(args []string) int {
	var addr, token string
	var asJSON bool
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.Usage = func() { c.UI.Error(c.Help()) }
	fs.StringVar(&addr, "consul-addr", "", "")
	fs.StringVar(&token, "token", "", "")
	fs.BoolVar(&asJSON, "json", false, "")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 1 {
		c.UI.Error("mariposa status: at most one SERVICE\n\n" + c.Help())
		return 1
	}
	cfg := api.DefaultConfig()
	if addr != "" {
		cfg.Address = addr
	}
	if token != "" {
		cfg.Token = token
	}
	client, err := api.NewClient(cfg)
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
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tNODE\tSTATE\tHEALTH\tVERSION\tLEADER\tDETAIL")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Service, r.Node, r.State, r.Health,
			dash(r.Version), dash(r.Leader), firstLine(r.Detail))
	}
	tw.Flush()
	c.UI.Output(strings.TrimRight(b.String(), "\n"))
	return 0
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
			r.Detail = hc.Output
			r.State = stateFrom(hc)
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

// stateFrom reads the supervisor check's status and output.
func stateFrom(hc *api.HealthCheck) string {
	out := hc.Output
	switch {
	case hc.Status == api.HealthPassing:
		return "running"
	case strings.HasPrefix(out, "waiting"):
		return "waiting"
	case strings.HasPrefix(out, "restarting"), strings.Contains(out, "; restarting"):
		return "restarting"
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

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
