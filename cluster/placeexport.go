package cluster

import (
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// ParsePenalties reads the pairs under PenaltyPrefix: per unit, per node,
// the end of its reschedule penalty (what the fleet agent's executor
// watches, and mariposa status and why read).
func ParsePenalties(pairs api.KVPairs) map[string]map[string]time.Time {
	return parsePenalties(pairs)
}

// ServicesNamed lists, sorted, the services a placement block's
// constraints and affinities name by service.<name> attributes: the ones
// whose nodes its ranking needs (referencedServices, for one unit).
func ServicesNamed(p *schema.Placement) []string {
	if p == nil {
		return nil
	}
	return referencedServices(map[string]UnitSpec{"": {Unit: placement.Unit{Placement: p}}})
}

// ServiceCounts counts a service's instances per node, from the catalog's
// answer of the service (every instance, passing or not, as a health
// query without passing-only counts them).
func ServiceCounts(ss []*api.CatalogService) map[string]int {
	out := map[string]int{}
	for _, s := range ss {
		if s != nil && s.Node != "" {
			out[s.Node]++
		}
	}
	return out
}

// WithServices returns nodes with Services filled from svcNodes (per
// service, per node, its instances), as a View has them.
func WithServices(nodes []placement.NodeInfo, svcNodes map[string]map[string]int) []placement.NodeInfo {
	return withServices(nodes, svcNodes)
}
