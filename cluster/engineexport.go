package cluster

import (
	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/schema"
)

// What `mariposa run -cluster` needs to feed the fleet's step machine
// (fleet/executor) the units cluster.Fleet reads, from the same layout and
// with the same codec (MARIPOSA_FLEET_ENGINE=agent).

// UnitsOf lists cfg's cluster units (each group with a count, each lone
// service with one): the units a node's own files define.
func UnitsOf(cfg *schema.Config) []UnitSpec { return unitsOf(cfg.Services, cfg.Groups) }

// ParseDeployments reads an answer of a List of DeployPrefix: each
// deployment by name, with its desired spec, its state and its stable
// pointer. Corrupt values are reported and skipped.
func ParseDeployments(pairs api.KVPairs, report func(key, msg string, err error)) map[string]*Deployment {
	if report == nil {
		report = func(string, string, error) {}
	}
	return parseDeployments(pairs, report)
}
