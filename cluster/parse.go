package cluster

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// The codecs of the answers of whole prefixes of the layout: slots/,
// deploy/, the mariposa service's health, penalty/ and control/, as
// mariposa status, why and plan read them (ReadState, FitSpec) and the step
// machine's executor has them read (ParseControl, ParsePenalties,
// ParseDeployments). Corrupt values are reported and skipped, safety
// first.

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
func parseNodes(entries []*api.ServiceEntry) []placement.NodeInfo {
	var nodes []placement.NodeInfo
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
		n := placement.NodeInfo{Name: e.Node.Node, Datacenter: e.Node.Datacenter, Meta: e.Node.Meta,
			MariposaVersion: e.Service.Meta["version"], Live: live, Eligible: e.Service.Meta["eligible"] != "false",
			Draining: e.Service.Meta["draining"] == "true",
			Fleet:    e.Service.Meta[checks.FleetMetaKey] == checks.FleetMetaValue,
			Capacity: placement.ParseCapacityMeta(e.Service.Meta)}
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
func FleetNodes(nodes []placement.NodeInfo) []placement.NodeInfo {
	var out []placement.NodeInfo
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

// slotKV is a slot key as read (parseSlots).
type slotKV struct {
	value       SlotValue
	session     string
	modifyIndex uint64
	corrupt     error
	// status is what the holder says about its current hold (parseSlots):
	// nil when the slot is not held or nothing is known.
	status *HoldStatus
}

// at says whether s is held at version want, and when it was first healthy
// at it in this hold (nil: not yet).
func (s slotKV) at(want string) (bool, *time.Time) {
	if s.status == nil || s.status.Version != want {
		return false, nil
	}
	return true, s.status.HealthyAt
}
