package executor

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// The placement inputs beyond the views (fleet/agent's place.go), and
// where they are read from:
//
//   - each node's attributes and capacity: the members' catalog answer
//     (the node's meta and datacenter, the registration's meta: version,
//     eligible, draining, capacity), which the members watch reads anyway;
//   - the reschedule penalties: a watch on penalty/ (written only by a
//     reschedule, so it costs a slot change nothing);
//   - the nodes of each service a unit's placement names (service.<name>
//     attributes, agent.ServicesNamed): one blocking query on that
//     service's catalog entries (/v1/catalog/service/<name>, every
//     instance, passing or not),
//     started and stopped as the units change; it answers only when that
//     service's instances (or their checks) change, with O(its instances)
//     entries;
//   - a Sticky unit's previous holders: one read of its slot keys when the
//     unit first comes (the node each free slot's value names); from then
//     on the agent follows them in the index views.

// nodeInfos reads the members' catalog entries as placement sees them
// (cluster's parseNodes, less the health, which the failing watch says):
// a node with two entries counts the one that runs the fleet, else the
// first.
func nodeInfos(ss []*api.CatalogService) map[string]placement.NodeInfo {
	out := make(map[string]placement.NodeInfo, len(ss))
	for _, s := range ss {
		fleet := s.ServiceMeta[checks.FleetMetaKey] == checks.FleetMetaValue
		if prev, dup := out[s.Node]; dup && (prev.Fleet || !fleet) {
			continue
		}
		out[s.Node] = placement.NodeInfo{Name: s.Node, Datacenter: s.Datacenter, Meta: s.NodeMeta,
			MariposaVersion: s.ServiceMeta["version"], Eligible: s.ServiceMeta["eligible"] != "false",
			Draining: s.ServiceMeta["draining"] == "true", Fleet: fleet,
			Capacity: placement.ParseCapacityMeta(s.ServiceMeta)}
	}
	return out
}

// watchPenalties follows penalty/<unit>/<node>.
func (e *Executor) watchPenalties() {
	e.watch(e.ctx, "penalties", func(q *api.QueryOptions) (uint64, func(), error) {
		pairs, meta, err := e.cfg.Client.KV().List(cluster.PenaltyPrefix, q)
		if err != nil {
			return 0, nil, err
		}
		pen := cluster.ParsePenalties(pairs)
		return meta.LastIndex, func() { e.inbox.post(agent.PenaltiesAnswer{Penalties: pen}) }, nil
	})
}

// readPrevious reads, once per Sticky unit, the slot keys' values: each
// free slot's previous holder (placement.View.Previous).
func (e *Executor) readPrevious(units []agent.Unit) {
	for _, u := range units {
		if !u.Sticky || e.prevRead[u.Name] {
			continue
		}
		if e.prevRead == nil {
			e.prevRead = map[string]bool{}
		}
		e.prevRead[u.Name] = true
		if w := e.units[u.Name]; w != nil {
			w.prevWait = true
		}
		go func(unit string) {
			ctx, cancel := e.request()
			defer cancel()
			prefix := agent.SlotID{Unit: unit}.Key()
			prefix = prefix[:strings.LastIndexByte(prefix, '/')+1]
			pairs, _, err := e.cfg.Client.KV().List(prefix, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				// Ranked without: the previous holder is a preference.
				e.log.Debug("read the previous holders", "unit", unit, "error", err)
			}
			e.inbox.post(previousRead{unit: unit, prev: previousOf(prefix, pairs)})
		}(u.Name)
	}
}

// previousRead: the read of a Sticky unit's previous holders is done.
type previousRead struct {
	unit string
	prev map[int]string
}

// previousRead gives the agent a Sticky unit's previous holders, then the
// index answer that waited for them (the first ranking has them: the
// previous holder is ranked first from the start).
func (e *Executor) previousRead(in previousRead) {
	if len(in.prev) > 0 {
		e.step(agent.PreviousAnswer{Unit: in.unit, Previous: in.prev})
	}
	w := e.units[in.unit]
	if w == nil || !w.prevWait {
		return
	}
	w.prevWait = false
	e.flushEarly(w)
}

// indexMayStep: a unit's index answer may go to the agent: its deployment
// was heard, its previous holders read (a Sticky unit), the penalties
// heard. Until then it waits in early, and the agent claims nothing of
// the unit on a ranking that would lack them.
func (e *Executor) indexMayStep(w *unitWatch) bool {
	return w.deployed && !w.prevWait && e.penHeard
}

// flushEarly steps w's index answer that waited, if it may go now.
func (e *Executor) flushEarly(w *unitWatch) {
	if early := w.early; early != nil && e.indexMayStep(w) {
		w.early = nil
		e.handle(*early)
	}
}

// penaltiesAnswer steps the penalties; the first lets the index answers
// that waited for it go, in the units' order.
func (e *Executor) penaltiesAnswer(in agent.PenaltiesAnswer) {
	e.step(in)
	if e.penHeard {
		return
	}
	e.penHeard = true
	for _, name := range e.unitNames {
		if w := e.units[name]; w != nil {
			e.flushEarly(w)
		}
	}
}

// previousOf is, for each free slot under prefix, the node its value names
// (released or lost; a failed slot, or one never claimed, has none).
func previousOf(prefix string, pairs api.KVPairs) map[int]string {
	out := map[int]string{}
	for _, p := range pairs {
		k, err := strconv.Atoi(strings.TrimPrefix(p.Key, prefix))
		if err != nil || k < 0 || p.Session != "" {
			continue
		}
		var v cluster.SlotValue
		if json.Unmarshal(p.Value, &v) != nil || v.State == cluster.SlotFailed || v.Node == "" {
			continue
		}
		out[k] = v.Node
	}
	return out
}

// infoMap is the members' attributes and capacity by node.
type infoMap = map[string]placement.NodeInfo

// membersAns: the members watch's answer, the fleet's nodes with their
// attributes and capacity, at index.
type membersAns struct {
	nodes []string
	info  infoMap
	index uint64
}

// membersAnswer steps the members; an answer older than the one stepped
// is not (a fresh read, fresh.go, may overtake the watch).
func (e *Executor) membersAnswer(in membersAns) {
	if in.index < e.memIndex && e.haveMem {
		return
	}
	e.members, e.info, e.haveMem, e.memIndex = in.nodes, in.info, true, in.index
	e.nodesAnswer()
}

// followServices keeps one watch per service the units' placements name
// (agent.ServicesNamed), started and stopped as the units change. Called
// from the loop.
func (e *Executor) followServices(units []agent.Unit) {
	want := agent.ServicesNamed(units)
	keep := make(map[string]bool, len(want))
	for _, name := range want {
		keep[name] = true
		if _, ok := e.svcWatch[name]; ok {
			continue
		}
		if e.svcWatch == nil {
			e.svcWatch = map[string]context.CancelFunc{}
		}
		ctx, cancel := context.WithCancel(e.ctx)
		e.svcWatch[name] = cancel
		go e.watchService(ctx, name)
	}
	for name, cancel := range e.svcWatch {
		if !keep[name] {
			cancel()
			delete(e.svcWatch, name)
			if _, ok := e.svcSeen[name]; ok {
				seen := maps.Clone(e.svcSeen)
				delete(seen, name)
				e.svcSeen = seen
			}
		}
	}
}

// watchService follows a service's catalog entries: its instances per node.
func (e *Executor) watchService(ctx context.Context, name string) {
	e.watch(ctx, "service "+name, func(q *api.QueryOptions) (uint64, func(), error) {
		ss, meta, err := e.cfg.Client.Catalog().Service(name, "", q)
		if err != nil {
			return 0, nil, err
		}
		nodes := cluster.ServiceCounts(ss)
		idx := meta.LastIndex
		return idx, func() { e.inbox.post(serviceAnswer{agent.ServicesAnswer{Service: name, Nodes: nodes}, idx}) }, nil
	})
}

// servicesAnswer steps a service's answer while it is still watched (an
// answer posted before its watch stopped is dropped: the agent has
// forgotten the service, and must not take it as heard).
func (e *Executor) servicesAnswer(in serviceAnswer) {
	if _, ok := e.svcWatch[in.Service]; ok {
		e.step(in.ServicesAnswer)
		seen := maps.Clone(e.svcSeen)
		if seen == nil {
			seen = map[string]uint64{}
		}
		seen[in.Service] = in.index
		e.svcSeen = seen // a new map: the snapshots share the old one
	}
}

// serviceAnswer is a service's answer with the catalog index it is of.
type serviceAnswer struct {
	agent.ServicesAnswer
	index uint64
}

// ServiceIndex is the catalog index of the last answer of service name
// (a service a unit's placement names) the loop has stepped, as of its
// last batch; 0 before one (or when no unit names it). What a node has
// placed by: a claim after ServiceIndex >= i saw the catalog as of i.
func (e *Executor) ServiceIndex(name string) uint64 {
	if s := e.snap.Load(); s != nil {
		return s.services[name]
	}
	return 0
}
