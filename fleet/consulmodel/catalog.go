package consulmodel

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/consul/api"
)

type catalogNode struct {
	address  string
	checks   map[string]string // node-level and service checks: ID -> status
	services map[string]*ServiceInstance
}

// ServiceInstance is one registration of a service on a node.
type ServiceInstance struct {
	Node    string
	ID      string
	Service string
	Meta    map[string]string
	Checks  []string // IDs of its checks
}

type catalog struct {
	nodes   map[string]*catalogNode
	svcIdx  map[string]uint64 // per service name, the health answer's index
	nodeIdx uint64
}

func newCatalog() catalog {
	return catalog{nodes: map[string]*catalogNode{}, svcIdx: map[string]uint64{}}
}

// RegisterNode adds a node with its serfHealth check passing (what an
// agent joining the cluster does).
func (s *Store) RegisterNode(node, address string) error {
	if !s.leader {
		return ErrNoLeader
	}
	if _, ok := s.catalog.nodes[node]; ok {
		return nil
	}
	s.catalog.nodes[node] = &catalogNode{address: address, checks: map[string]string{"serfHealth": api.HealthPassing},
		services: map[string]*ServiceInstance{}}
	s.catalog.nodeIdx = s.raft()
	return nil
}

// RegisterService registers (or replaces) a service instance and its
// checks, each with the given initial status.
func (s *Store) RegisterService(si ServiceInstance, checks map[string]string) error {
	if !s.leader {
		return ErrNoLeader
	}
	n, ok := s.catalog.nodes[si.Node]
	if !ok {
		return fmt.Errorf("node %q is not registered", si.Node)
	}
	c := si
	c.Meta = maps.Clone(si.Meta)
	c.Checks = slices.Sorted(maps.Keys(checks))
	n.services[si.ID] = &c
	maps.Copy(n.checks, checks)
	idx := s.raft()
	s.catalog.svcIdx[si.Service] = idx
	s.commits = append(s.commits, Commit{Index: idx, Services: []string{si.Service}})
	return nil
}

// DeregisterService removes a service instance and its checks.
func (s *Store) DeregisterService(node, id string) error {
	if !s.leader {
		return ErrNoLeader
	}
	n, ok := s.catalog.nodes[node]
	if !ok {
		return nil
	}
	si, ok := n.services[id]
	if !ok {
		return nil
	}
	delete(n.services, id)
	for _, c := range si.Checks {
		delete(n.checks, c)
	}
	idx := s.raft()
	s.catalog.svcIdx[si.Service] = idx
	s.commits = append(s.commits, Commit{Index: idx, Services: []string{si.Service}})
	return nil
}

// SetCheck updates a check's status at now: one Raft write when it
// changes. A check going critical invalidates, in the same write, every
// session bound to it (Consul's checkSessionsTxn), so the keys those
// sessions hold are released with their lock delay.
func (s *Store) SetCheck(now time.Time, node, check, status string) error {
	if !s.leader {
		return ErrNoLeader
	}
	n, ok := s.catalog.nodes[node]
	if !ok {
		return fmt.Errorf("node %q is not registered", node)
	}
	if _, ok := n.checks[check]; !ok {
		return fmt.Errorf("check %q on node %q is not registered", check, node)
	}
	if n.checks[check] == status {
		return nil
	}
	n.checks[check] = status
	idx := s.raft()
	// The health answer of every service on the node can change: a node
	// check applies to all of them.
	var svcs []string
	for _, si := range n.services {
		if check == "serfHealth" || slices.Contains(si.Checks, check) {
			s.catalog.svcIdx[si.Service] = idx
			svcs = append(svcs, si.Service)
		}
	}
	sort.Strings(svcs)
	svcs = slices.Compact(svcs)
	t := s.begin(idx)
	if status == api.HealthCritical {
		for _, se := range s.Sessions() {
			if se.Node == node && slices.Contains(se.Checks, check) {
				t.invalidate(now, se.ID)
			}
		}
	}
	t.commit()
	if len(svcs) > 0 {
		if l := len(s.commits); l > 0 && s.commits[l-1].Index == idx {
			s.commits[l-1].Services = svcs
		} else {
			s.commits = append(s.commits, Commit{Index: idx, Services: svcs})
		}
	}
	return nil
}

// HealthEntry is one instance in a health answer, with the status of the
// node's serfHealth and of its own checks combined as Consul's
// AggregatedStatus does.
type HealthEntry struct {
	Instance ServiceInstance
	Status   string
}

// ServiceIndex is the index a health query of the service answers with.
func (s *Store) ServiceIndex(name string) uint64 {
	if idx := s.catalog.svcIdx[name]; idx != 0 {
		return idx
	}
	return max(s.catalog.nodeIdx, 1)
}

// HealthService is GET /v1/health/service/<name>: every instance with its
// aggregated status (passingOnly keeps the passing ones), and the
// service's index.
func (s *Store) HealthService(name string, passingOnly, stale bool) ([]HealthEntry, uint64, error) {
	if !stale && !s.leader {
		return nil, 0, ErrNoLeader
	}
	var out []HealthEntry
	nodes := slices.Sorted(maps.Keys(s.catalog.nodes))
	for _, nn := range nodes {
		n := s.catalog.nodes[nn]
		ids := slices.Sorted(maps.Keys(n.services))
		for _, id := range ids {
			si := n.services[id]
			if si.Service != name {
				continue
			}
			st := aggregate(append([]string{n.checks["serfHealth"]}, statuses(n, si.Checks)...))
			if passingOnly && st != api.HealthPassing {
				continue
			}
			c := *si
			c.Meta = maps.Clone(si.Meta)
			out = append(out, HealthEntry{Instance: c, Status: st})
		}
	}
	return out, s.ServiceIndex(name), nil
}

func statuses(n *catalogNode, ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, n.checks[id])
	}
	return out
}

// aggregate is api.HealthChecks.AggregatedStatus: critical beats
// warning beats passing.
func aggregate(st []string) string {
	out := api.HealthPassing
	for _, s := range st {
		switch s {
		case api.HealthCritical, api.HealthMaint:
			return api.HealthCritical
		case api.HealthWarning:
			out = api.HealthWarning
		}
	}
	return out
}
