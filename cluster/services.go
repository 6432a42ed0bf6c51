package cluster

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// referencedServices lists the services named by service.<name> attributes
// in the units' constraints and affinities: the ones placement needs to
// know the nodes of.
func referencedServices(units map[string]UnitSpec) []string {
	seen := map[string]bool{}
	add := func(attr string) {
		a := placement.TrimAttr(attr)
		if name, ok := strings.CutPrefix(a, placement.AttrServicePrefix); ok && name != "" {
			seen[name] = true
		}
	}
	for _, u := range units {
		p := u.Unit.Placement
		if p == nil {
			continue
		}
		for _, c := range p.Constraints {
			add(c.Attribute)
		}
		for _, a := range p.Affinities {
			add(a.Attribute)
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// countByNode counts a service's instances per node.
func countByNode(entries []*api.ServiceEntry) map[string]int {
	out := map[string]int{}
	for _, e := range entries {
		if e.Node != nil {
			out[e.Node.Node]++
		}
	}
	return out
}

// withServicesRead reads the nodes of the services the units' attributes
// name (one read each, as the commands need them once) and returns nodes
// with them filled in.
func withServicesRead(client *api.Client, nodes []placement.NodeInfo, units map[string]UnitSpec, q *api.QueryOptions) ([]placement.NodeInfo, error) {
	svcNodes := map[string]map[string]int{}
	for _, name := range referencedServices(units) {
		entries, _, err := client.Health().Service(name, "", false, q)
		if err != nil {
			return nil, fmt.Errorf("read the service %s: %w", name, err)
		}
		svcNodes[name] = countByNode(entries)
	}
	return withServices(nodes, svcNodes), nil
}

// withServices returns nodes with Services filled from svcNodes.
func withServices(nodes []placement.NodeInfo, svcNodes map[string]map[string]int) []placement.NodeInfo {
	if len(svcNodes) == 0 {
		return nodes
	}
	out := make([]placement.NodeInfo, len(nodes))
	for i, n := range nodes {
		n.Services = map[string]int{}
		for svc, byNode := range svcNodes {
			if c := byNode[n.Name]; c > 0 {
				n.Services[svc] = c
			}
		}
		out[i] = n
	}
	return out
}
