package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// parseNodes reads which nodes run the fleet from their mariposa
// registration's meta; the fleet's own view (FleetNodes) keeps only those.
// A node with two supervisors (-allow-second-supervisor) is one node: in the
// fleet when either registration says so, live as that registration is.
func TestParseNodesFleet(t *testing.T) {
	entry := func(node, id string, fleet bool, status string) *api.ServiceEntry {
		meta := map[string]string{checks.ManagedByKey: checks.ManagedByValue}
		if fleet {
			meta[checks.FleetMetaKey] = checks.FleetMetaValue
		}
		return &api.ServiceEntry{Node: &api.Node{Node: node},
			Service: &api.AgentService{ID: id, Service: "mariposa", Meta: meta},
			Checks:  api.HealthChecks{{CheckID: id + ":mariposa", Status: status}, {CheckID: "serfHealth", Status: api.HealthPassing}}}
	}
	type want struct{ fleet, live bool }
	for _, tc := range []struct {
		name    string
		entries []*api.ServiceEntry
		want    map[string]want
		fleet   []string // FleetNodes, in order
	}{
		{name: "plain and fleet nodes",
			entries: []*api.ServiceEntry{entry("e0", "mariposa-e0", true, api.HealthPassing), entry("e1", "mariposa-e1", false, api.HealthPassing)},
			want:    map[string]want{"e0": {true, true}, "e1": {false, true}}, fleet: []string{"e0"}},
		{name: "no meta: not in the fleet (an older mariposa, or a plain run)",
			entries: []*api.ServiceEntry{entry("e1", "mariposa-e1", false, api.HealthPassing)},
			want:    map[string]want{"e1": {false, true}}},
		{name: "a plain second supervisor first: the fleet one counts",
			entries: []*api.ServiceEntry{entry("e0", "mariposa-e0-77", false, api.HealthCritical), entry("e0", "mariposa-e0", true, api.HealthPassing)},
			want:    map[string]want{"e0": {true, true}}, fleet: []string{"e0"}},
		{name: "a plain second supervisor after: the fleet one stays",
			entries: []*api.ServiceEntry{entry("e0", "mariposa-e0", true, api.HealthCritical), entry("e0", "mariposa-e0-77", false, api.HealthPassing)},
			want:    map[string]want{"e0": {true, false}}, fleet: []string{"e0"}},
		{name: "not managed by mariposa: no node",
			entries: []*api.ServiceEntry{{Node: &api.Node{Node: "x"}, Service: &api.AgentService{ID: "mariposa", Service: "mariposa"}}},
			want:    map[string]want{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := parseNodes(tc.entries)
			if len(nodes) != len(tc.want) {
				t.Fatalf("%d nodes %+v, want %d", len(nodes), nodes, len(tc.want))
			}
			for _, n := range nodes {
				if w := tc.want[n.Name]; n.Fleet != w.fleet || n.Live != w.live {
					t.Errorf("%s: fleet %v live %v, want %+v", n.Name, n.Fleet, n.Live, w)
				}
			}
			var got []string
			for _, n := range FleetNodes(nodes) {
				got = append(got, n.Name)
			}
			if len(got) != len(tc.fleet) || (len(got) > 0 && got[0] != tc.fleet[0]) {
				t.Errorf("FleetNodes = %v, want %v", got, tc.fleet)
			}
		})
	}
}

// The View a command builds from the whole catalog (mariposa why) never
// ranks a node that does not run the fleet: it is listed, "not in the
// fleet", and the slots go to the fleet nodes.
func TestAssignSkipsNodesNotInFleet(t *testing.T) {
	nodes := parseNodes([]*api.ServiceEntry{
		{Node: &api.Node{Node: "a-plain"}, Service: &api.AgentService{ID: "mariposa-a-plain", Service: "mariposa",
			Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue}}},
		{Node: &api.Node{Node: "b"}, Service: &api.AgentService{ID: "mariposa-b", Service: "mariposa",
			Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue, checks.FleetMetaKey: checks.FleetMetaValue}}},
		{Node: &api.Node{Node: "c"}, Service: &api.AgentService{ID: "mariposa-c", Service: "mariposa",
			Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue, checks.FleetMetaKey: checks.FleetMetaValue}}},
	})
	u := placement.Unit{Name: "two", Placement: &schema.Placement{Count: 2, MaxPerNode: 1}}
	asg := placement.Assign(u, []int{0, 1}, placement.View{Nodes: nodes}, time.Now())
	firsts := map[string]bool{}
	for _, k := range []int{0, 1} {
		var top string
		for _, r := range asg[k] {
			if r.Node == "a-plain" {
				if r.Verdict.OK || r.Verdict.Filter != placement.FilterNotInFleet {
					t.Errorf("slot %d: the plain node's verdict %+v", k, r.Verdict)
				}
			} else if r.Verdict.OK && r.Rank == 0 {
				top = r.Node
			}
		}
		firsts[top] = true
	}
	if !firsts["b"] || !firsts["c"] {
		t.Errorf("slots' first choices %v, want b and c", firsts)
	}
}
