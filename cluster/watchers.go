package cluster

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/agenterr"
)

// watch runs a blocking query until ctx ends: fetch(index) returns the new
// index; errors back off (capped at 5s; the local agent's, agenterr.Local,
// are asked again at once) and are logged once per streak.
func (f *Fleet) watch(ctx context.Context, what string, fetch func(q *api.QueryOptions) (uint64, error)) {
	var index uint64
	failures := 0
	for ctx.Err() == nil {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Minute}).WithContext(ctx)
		idx, err := fetch(q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if failures == 1 || failures%20 == 0 {
				f.log.Warn("cannot read from Consul; retrying", "what", what, "error", err)
			}
			// Only a server's refusal backs off: the local agent's
			// (starting, not joined yet) costs the servers nothing, and
			// this node must see a deployment as soon as its peers do.
			wait := min(100*time.Millisecond<<min(failures, 6), 5*time.Second)
			if agenterr.Local(err) {
				wait = agenterr.RetryLocal
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			index = 0
			continue
		}
		failures = 0
		if idx < index {
			index = 0 // the index went backwards: start over
		} else {
			index = idx
		}
	}
}

// watchDeploy follows deploy/: each deployment's desired spec.
func (f *Fleet) watchDeploy(ctx context.Context) {
	reported := map[string]bool{}
	f.watch(ctx, "deployments", func(q *api.QueryOptions) (uint64, error) {
		pairs, meta, err := f.cfg.Client.KV().List(DeployPrefix, q)
		if err != nil {
			return 0, err
		}
		deps := parseDeployments(pairs, func(key, msg string, err error) { f.reportOnce(reported, key, msg, err) })
		f.mu.Lock()
		f.remote, f.haveDep = deps, true
		f.mu.Unlock()
		f.wake()
		return meta.LastIndex, nil
	})
}

func (f *Fleet) reportOnce(seen map[string]bool, key, msg string, err error) {
	if seen[key] {
		return
	}
	seen[key] = true
	f.log.Error(msg, "key", key, "error", err)
}

// watchSlots follows slots/: every slot's holder and value.
func (f *Fleet) watchSlots(ctx context.Context) {
	reported := map[string]bool{}
	f.watch(ctx, "slots", func(q *api.QueryOptions) (uint64, error) {
		pairs, meta, err := f.cfg.Client.KV().List(SlotsPrefix, q)
		if err != nil {
			return 0, err
		}
		slots := parseSlots(pairs, func(key, msg string, err error) { f.reportOnce(reported, key, msg, err) })
		f.mu.Lock()
		f.slots, f.haveSl = slots, true
		f.mu.Unlock()
		f.wake()
		return meta.LastIndex, nil
	})
}

// watchNodes follows the service "mariposa": every supervisor, its node's
// meta, and whether it is live (every check of it passing: serfHealth and
// its liveness).
func (f *Fleet) watchNodes(ctx context.Context) {
	f.watch(ctx, "supervisors", func(q *api.QueryOptions) (uint64, error) {
		entries, meta, err := f.cfg.Client.Health().Service("mariposa", "", false, q)
		if err != nil {
			return 0, err
		}
		nodes := FleetNodes(parseNodes(entries))
		f.mu.Lock()
		f.nodes, f.haveNd = nodes, true
		f.vanished, f.base = f.vanish.observe(nodes, f.cfg.Now())
		f.mu.Unlock()
		f.wake()
		return meta.LastIndex, nil
	})
}

// watchPenalties follows penalty/<unit>/<node>.
func (f *Fleet) watchPenalties(ctx context.Context) {
	f.watch(ctx, "penalties", func(q *api.QueryOptions) (uint64, error) {
		pairs, meta, err := f.cfg.Client.KV().List(PenaltyPrefix, q)
		if err != nil {
			return 0, err
		}
		pen := parsePenalties(pairs)
		f.mu.Lock()
		f.penalty = pen
		f.mu.Unlock()
		f.wake()
		return meta.LastIndex, nil
	})
}

// watchControl follows control/: the storm brake (and, later, pause).
func (f *Fleet) watchControl(ctx context.Context) {
	reported := map[string]bool{}
	f.watch(ctx, "control", func(q *api.QueryOptions) (uint64, error) {
		pairs, meta, err := f.cfg.Client.KV().List(ControlPrefix, q)
		if err != nil {
			return 0, err
		}
		report := func(key, msg string, err error) { f.reportOnce(reported, key, msg, err) }
		storm, takeovers := parseControl(pairs, report)
		pauses, drops := parsePauses(pairs, report)
		drains := parseDrains(pairs, report)
		f.mu.Lock()
		f.drains = drains
		pauseChanged := !reflect.DeepEqual(pauses, f.pauses) || !reflect.DeepEqual(drops, f.drops) || !f.haveCtl
		f.pauses, f.drops = pauses, drops
		f.takeovers = takeovers
		if f.storm != nil && storm == nil {
			// Resumed: the vanishings that engaged the brake are dealt
			// with; only new ones count towards the next storm.
			f.vanish.forget()
		}
		f.storm, f.haveCtl = storm, true
		f.mu.Unlock()
		if pauseChanged {
			f.cfg.Runner.SetPause(f.pauseFunc())
		}
		f.wake()
		return meta.LastIndex, nil
	})
}

// parseControl reads control/: the storm record, if the brake is engaged,
// and the takeover log. A corrupt record is reported and skipped (the
// brake is not engaged); a corrupt log is reported and counts as empty
// (the next takeover overwrites it).
func parseControl(pairs api.KVPairs, report func(key, msg string, err error)) (*StormRecord, TakeoverLog) {
	var storm *StormRecord
	var log TakeoverLog
	for _, p := range pairs {
		switch p.Key {
		case StormKey:
			r, err := DecodeStormRecord(p.Value)
			if err != nil {
				report(p.Key, "a corrupt storm record; ignoring it (mariposa resume deletes it)", err)
				continue
			}
			storm = &r
		case TakeoversKey:
			l, err := DecodeTakeoverLog(p.Value)
			if err != nil {
				report(p.Key, "a corrupt takeover log; counting it as empty", err)
				continue
			}
			log = l
		}
	}
	return storm, log
}

// parseDeploy reads deploy/: each deployment's desired spec. Corrupt values
// are reported and skipped.
func parseDeploy(pairs api.KVPairs, report func(key, msg string, err error)) map[string]*Spec {
	specs := map[string]*Spec{}
	for name, d := range parseDeployments(pairs, report) {
		specs[name] = d.Spec
	}
	return specs
}

// parseSlots reads slots/: unit -> k -> the key, with the hold's status
// from the status key beside it when that is the current hold's.
func parseSlots(pairs api.KVPairs, report func(key, msg string, err error)) map[string]map[int]slotKV {
	slots := map[string]map[int]slotKV{}
	statuses := map[string]HoldStatus{}
	for _, p := range pairs {
		if lock, ok := strings.CutSuffix(p.Key, statusSuffix); ok {
			if _, _, isSlot := parseSlotKey(lock); isSlot {
				var st HoldStatus
				if err := json.Unmarshal(p.Value, &st); err != nil {
					report(p.Key, "a corrupt slot status; ignoring it", err)
					continue
				}
				statuses[lock] = st
				continue
			}
		}
		unit, k, ok := parseSlotKey(p.Key)
		if !ok {
			report(p.Key, "a key under slots/ that is not a slot; ignoring it", nil)
			continue
		}
		v, err := DecodeSlotValue(p.Value)
		if err != nil {
			report(p.Key, "a corrupt slot value; the slot is not claimed until it is fixed or deleted", err)
		}
		if slots[unit] == nil {
			slots[unit] = map[int]slotKV{}
		}
		slots[unit][k] = slotKV{value: v, session: p.Session, modifyIndex: p.ModifyIndex, corrupt: err}
	}
	for unit, ks := range slots {
		for k, s := range ks {
			s.status = holdStatus(s, statuses[SlotKey(unit, k)])
			ks[k] = s
		}
	}
	return slots
}

// holdStatus is what s's holder says about its current hold: st when it is
// this hold's (its Index is the key's ModifyIndex, which stays the claim's
// while held); else, for a held key, what the claim wrote into the key (a
// mariposa older than the status key also wrote the hold's later version
// and health there); nil for a key not held.
func holdStatus(s slotKV, st HoldStatus) *HoldStatus {
	switch {
	case s.session == "" || s.corrupt != nil:
		return nil
	case st.Index != 0 && st.Index == s.modifyIndex:
		return &st
	case s.value.Version != "":
		return &HoldStatus{Index: s.modifyIndex, Version: s.value.Version, HealthyAt: s.value.HealthyAt}
	}
	return nil
}

// parseNodes reads the health of the service "mariposa": one NodeInfo per
// node. A node with two supervisors (-allow-second-supervisor) has two
// entries: the one that runs the fleet counts, else the first.
func parseNodes(entries []*api.ServiceEntry) []NodeInfo {
	var nodes []NodeInfo
	at := map[string]int{}
	for _, e := range entries {
		if e.Node == nil || e.Service == nil || e.Service.Meta[checks.ManagedByKey] != checks.ManagedByValue {
			continue
		}
		live := true
		for _, c := range e.Checks {
			if c.Status != api.HealthPassing {
				live = false
			}
		}
		n := NodeInfo{Name: e.Node.Node, Datacenter: e.Node.Datacenter, Meta: e.Node.Meta,
			MariposaVersion: e.Service.Meta["version"], Live: live, Eligible: e.Service.Meta["eligible"] != "false",
			Draining: e.Service.Meta["draining"] == "true",
			Fleet:    e.Service.Meta[checks.FleetMetaKey] == checks.FleetMetaValue,
			Capacity: ParseCapacityMeta(e.Service.Meta)}
		if i, dup := at[n.Name]; dup {
			if n.Fleet && !nodes[i].Fleet {
				nodes[i] = n
			}
			continue
		}
		at[n.Name] = len(nodes)
		nodes = append(nodes, n)
	}
	return nodes
}

// FleetNodes keeps the nodes that run the fleet: the ones the fleet
// counts (placement, the storm brake, the takeover budget, the node that
// judges deployments).
func FleetNodes(nodes []NodeInfo) []NodeInfo {
	var out []NodeInfo
	for _, n := range nodes {
		if n.Fleet {
			out = append(out, n)
		}
	}
	return out
}

// parsePenalties reads penalty/<unit>/<node>.
func parsePenalties(pairs api.KVPairs) map[string]map[string]time.Time {
	pen := map[string]map[string]time.Time{}
	for _, p := range pairs {
		unit, node, ok := strings.Cut(strings.TrimPrefix(p.Key, PenaltyPrefix), "/")
		if !ok {
			continue
		}
		var v struct {
			Until time.Time `json:"until"`
		}
		if json.Unmarshal(p.Value, &v) != nil {
			continue
		}
		if pen[unit] == nil {
			pen[unit] = map[string]time.Time{}
		}
		pen[unit][node] = v.Until
	}
	return pen
}
