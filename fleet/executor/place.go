package executor

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// The placement inputs beyond the views (fleet/agent's place.go), from
// what cluster.Fleet reads them:
//
//   - each node's attributes and capacity: the members' catalog answer
//     (the node's meta and datacenter, the registration's meta: version,
//     eligible, draining, capacity), which the members watch reads anyway;
//   - the reschedule penalties: a watch on penalty/ (written only by a
//     reschedule, so it costs a slot change nothing);
//   - a Sticky unit's previous holders: one read of its slot keys when the
//     unit first comes (the node each free slot's value names); from then
//     on the agent follows them in the index views.

// nodeInfos reads the members' catalog entries as placement sees them
// (cluster's parseNodes, less the health, which the failing watch says):
// a node with two entries counts the one that runs the fleet, else the
// first.
func nodeInfos(ss []*api.CatalogService) map[string]cluster.NodeInfo {
	out := make(map[string]cluster.NodeInfo, len(ss))
	for _, s := range ss {
		fleet := s.ServiceMeta[checks.FleetMetaKey] == checks.FleetMetaValue
		if prev, dup := out[s.Node]; dup && (prev.Fleet || !fleet) {
			continue
		}
		out[s.Node] = cluster.NodeInfo{Name: s.Node, Datacenter: s.Datacenter, Meta: s.NodeMeta,
			MariposaVersion: s.ServiceMeta["version"], Eligible: s.ServiceMeta["eligible"] != "false",
			Draining: s.ServiceMeta["draining"] == "true", Fleet: fleet,
			Capacity: cluster.ParseCapacityMeta(s.ServiceMeta)}
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
// free slot's previous holder (cluster.View.Previous).
func (e *Executor) readPrevious(units []agent.Unit) {
	for _, u := range units {
		if !u.Sticky || e.prevRead[u.Name] {
			continue
		}
		if e.prevRead == nil {
			e.prevRead = map[string]bool{}
		}
		e.prevRead[u.Name] = true
		go func(unit string) {
			ctx, cancel := e.request()
			defer cancel()
			prefix := agent.SlotID{Unit: unit}.Key()
			prefix = prefix[:strings.LastIndexByte(prefix, '/')+1]
			pairs, _, err := e.cfg.Client.KV().List(prefix, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				e.log.Debug("read the previous holders", "unit", unit, "error", err)
				return
			}
			if prev := previousOf(prefix, pairs); len(prev) > 0 {
				e.inbox.post(agent.PreviousAnswer{Unit: unit, Previous: prev})
			}
		}(u.Name)
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
type infoMap = map[string]cluster.NodeInfo

// membersAns: the members watch's answer, the fleet's nodes with their
// attributes and capacity.
type membersAns struct {
	nodes []string
	info  infoMap
}
