// FitSpec: the reads behind how a spec fits the fleet (placement.Fit),
// for mariposa plan and deploy.

package cluster

import (
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// FitSpec reads the live supervisors (and the services the spec's
// constraints name) and says how each unit of spec fits.
func FitSpec(client *api.Client, spec *Spec) ([]placement.Fit, error) {
	q := &api.QueryOptions{RequireConsistent: true}
	entries, _, err := client.Health().Service("mariposa", "", false, q)
	if err != nil {
		return nil, fmt.Errorf("read the mariposa service: %w", err)
	}
	nodes := parseNodes(entries)
	units := map[string]UnitSpec{}
	for _, u := range spec.Units() {
		units[u.Unit.Name] = u
	}
	if nodes, err = withServicesRead(client, nodes, units, q); err != nil {
		return nil, err
	}
	others, err := reservedByOthers(client, spec, q)
	if err != nil {
		return nil, err
	}
	var out []placement.Fit
	for _, u := range spec.Units() {
		out = append(out, placement.FitOfReserved(u.Unit, nodes, others[u.Unit.Name]))
	}
	return out, nil
}

// reservedByOthers reads slots/ and deploy/ and says, per unit of spec,
// what the slots of every other deployed unit reserve on each node (each
// as its deployed spec says).
func reservedByOthers(client *api.Client, spec *Spec, q *api.QueryOptions) (map[string]map[string]placement.Reservation, error) {
	pairs, _, err := client.KV().List(SlotsPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", SlotsPrefix, err)
	}
	ignore := func(string, string, error) {}
	slots := parseSlots(pairs, ignore)
	dpairs, _, err := client.KV().List(DeployPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", DeployPrefix, err)
	}
	deployed := map[string]UnitSpec{}
	for _, sp := range parseDeploy(dpairs, ignore) {
		if sp == nil {
			continue
		}
		for _, u := range sp.Units() {
			deployed[u.Unit.Name] = u
		}
	}
	all := reservedBy(slots, deployed)
	out := map[string]map[string]placement.Reservation{}
	for _, u := range spec.Units() {
		own := reservedBy(map[string]map[int]slotKV{u.Unit.Name: slots[u.Unit.Name]}, deployed)
		m := map[string]placement.Reservation{}
		for node, r := range all {
			m[node] = r.Sub(own[node])
		}
		out[u.Unit.Name] = m
	}
	return out, nil
}
