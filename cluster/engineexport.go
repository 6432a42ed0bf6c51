package cluster

import (
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// What `mariposa run -cluster` needs to feed the fleet's step machine
// (fleet/executor) its units, from the layout and with the codec of this
// package.

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

// MergeUnits is every unit by name: the deployed ones (deployments by
// name, in order; a unit deployed twice is told to dup and the first is
// kept), then the node's own (a name deployed and also in the node's
// files is the deployed one).
func MergeUnits(remote map[string]*Deployment, local []UnitSpec, dup func(unit, deployment string)) map[string]UnitSpec {
	out := map[string]UnitSpec{}
	for _, n := range slices.Sorted(maps.Keys(remote)) {
		for _, u := range remote[n].Spec.Units() {
			if _, seen := out[u.Unit.Name]; seen {
				if dup != nil {
					dup(u.Unit.Name, n)
				}
				continue
			}
			out[u.Unit.Name] = u
		}
	}
	for _, u := range local {
		if _, seen := out[u.Unit.Name]; !seen {
			out[u.Unit.Name] = u
		}
	}
	return out
}

// SlotHealthy says whether the instances of slot id ("<unit>/<k>", the
// snapshots' Slot) are healthy per mode (an update block's health_check:
// "checks" or "running"), and, with "checks" where mariposa runs every
// check itself, since when they passed there (zero otherwise): the rule
// run -cluster tells the step machine a slot's health by (slotHealthy).
func SlotHealthy(snaps []supervisor.Snapshot, id string, u UnitSpec, mode string) (bool, time.Time) {
	ok, _, local, _ := slotHealthy(snaps, id, u, mode)
	return ok, local
}

// SlotHealth is SlotHealthy with the members' PIDs (a restart, other
// PIDs, breaks a healthy streak: nextStreak).
func SlotHealth(snaps []supervisor.Snapshot, id string, u UnitSpec, mode string) (bool, []int, time.Time) {
	ok, pids, local, _ := slotHealthy(snaps, id, u, mode)
	return ok, pids, local
}
