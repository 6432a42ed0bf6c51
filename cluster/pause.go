package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// Pause and resume (CLUSTER.md section 6, RFD 36's task queue). An
// operator's pause is a key under control/, which every node already
// follows with one blocking query:
//
//	control/pause-all        the whole fleet
//	control/pause/<unit>     one unit (a service or group with count, or a
//	                         node's own service by name)
//
// Its scope says what freezes: "placement" (no claims, no reschedules),
// "deploy" (no rollout tokens taken, no auto_revert) or "all" (both, and
// the supervisor's automatic restarts: a crashed child stays down, its
// check saying what it would do). Never paused: stopping a child whose
// slot or leadership cannot be confirmed, graceful shutdown, an operator's
// own commands, and scale-downs and removals that a deploy asked for.
//
// While paused, each node lists what it holds back in nodes/<node>/intents
// (mariposa queue); mariposa queue drop ID drops a held restart for good
// (control/drops/<id>): the instance stays down, failed.

// Pause scopes.
const (
	PauseAll       = "all"
	PausePlacement = "placement"
	PauseDeploy    = "deploy"
)

// PauseAllKey is control/pause-all; PausePrefix + unit pauses one unit.
const (
	PauseAllKey = ControlPrefix + "pause-all"
	PausePrefix = ControlPrefix + "pause/"
	DropsPrefix = ControlPrefix + "drops/"
)

// PauseRecord is a pause key's value.
type PauseRecord struct {
	Scope  string    `json:"scope"`
	Unit   string    `json:"unit,omitempty"` // "": the whole fleet
	Reason string    `json:"reason"`
	Actor  string    `json:"actor"`
	At     time.Time `json:"at"`
}

// Covers: r pauses what scope names.
func (r PauseRecord) covers(scope string) bool { return r.Scope == PauseAll || r.Scope == scope }

// Why says it for a supervisor check or a queue entry.
func (r PauseRecord) Why() string {
	return fmt.Sprintf("paused by %s at %s: %s", r.Actor, r.At.UTC().Format(time.RFC3339), r.Reason)
}

// Drop is control/drops/<id>: an intent dropped from the queue.
type Drop struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// Intent is one action a node holds back while paused: an entry of the
// queue, in nodes/<node>/intents.
type Intent struct {
	ID      string    `json:"id"`
	Node    string    `json:"node"`
	Kind    string    `json:"kind"` // restart, claim, reschedule, update
	Target  string    `json:"target"`
	Detail  string    `json:"detail,omitempty"`
	Since   time.Time `json:"since"`
	Dropped string    `json:"dropped,omitempty"` // by whom, when dropped
}

// IntentsKey is nodes/<node>/intents.
func IntentsKey(node string) string { return Prefix + "nodes/" + node + "/intents" }

// intentID names an intent the same way on every read: short, stable.
func intentID(node, kind, target string) string {
	h := sha256.Sum256([]byte(node + "\x00" + kind + "\x00" + target))
	return hex.EncodeToString(h[:4])
}

// PauseKey is the key of a pause of unit ("" for the whole fleet).
func PauseKey(unit string) string {
	if unit == "" {
		return PauseAllKey
	}
	return PausePrefix + unit
}

// Pause writes a pause (replacing one of the same target) with its
// record, in one transaction.
func Pause(client *api.Client, unit, scope, reason, by string) (PauseRecord, error) {
	switch scope {
	case PauseAll, PausePlacement, PauseDeploy:
	default:
		return PauseRecord{}, fmt.Errorf("scope %q: use all, placement or deploy", scope)
	}
	if strings.TrimSpace(reason) == "" {
		return PauseRecord{}, errors.New("say why with -reason: it is what every paused instance and the queue show")
	}
	r := PauseRecord{Scope: scope, Unit: unit, Reason: reason, Actor: by, At: time.Now().UTC()}
	b, _ := json.Marshal(r)
	target := unit
	if target == "" {
		target = "the fleet"
	}
	ok, _, _, err := client.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: PauseKey(unit), Value: b}},
		AuditOp(AuditEvent{At: r.At, Node: "-", Actor: by, Service: unit, Action: "pause", To: scope,
			Reason: target + ": " + reason}),
	}, nil)
	if err != nil {
		return PauseRecord{}, err
	}
	if !ok {
		return PauseRecord{}, errors.New("the pause was not written; run it again")
	}
	return r, nil
}

// Lifted is what a resume lifted.
type Lifted struct {
	Pauses []PauseRecord
	Storm  *StormRecord
	Drops  int
}

// ResumeAll lifts the pauses (every one, or only unit's) and, for the whole
// fleet, the storm brake and the dropped intents: deleted by check-and-set
// with one record each, in one transaction.
func ResumeAll(client *api.Client, unit, by string) (Lifted, error) {
	pairs, _, err := client.KV().List(ControlPrefix, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return Lifted{}, err
	}
	var out Lifted
	var ops api.TxnOps
	now := time.Now().UTC()
	for _, p := range pairs {
		isPause := p.Key == PauseAllKey || strings.HasPrefix(p.Key, PausePrefix)
		switch {
		case isPause && (unit == "" || p.Key == PauseKey(unit)):
			var r PauseRecord
			if json.Unmarshal(p.Value, &r) != nil {
				r = PauseRecord{Reason: "a corrupt pause record", Unit: strings.TrimPrefix(p.Key, PausePrefix)}
			}
			out.Pauses = append(out.Pauses, r)
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: p.Key, Index: p.ModifyIndex}},
				AuditOp(AuditEvent{At: now, Node: "-", Actor: by, Service: r.Unit, Action: "resume", From: r.Scope,
					Reason: "lifted: " + r.Why()}))
		case p.Key == StormKey && unit == "":
			r, derr := DecodeStormRecord(p.Value)
			reason := "corrupt storm record"
			if derr == nil {
				reason = "storm brake engaged by " + r.Node + " at " + r.At.UTC().Format(time.RFC3339) + ": " + r.Reason()
			}
			out.Storm = &r
			lifted := StormLifted{At: now, By: by}
			if derr == nil {
				lifted.Storm = &r
			}
			entries, _, err := client.Health().Service("mariposa", "", false, &api.QueryOptions{RequireConsistent: true})
			if err != nil {
				return Lifted{}, fmt.Errorf("read the mariposa service: %w", err)
			}
			lifted.Down = LiftedDown(lifted.Storm, parseNodes(entries))
			// The lifted key goes with the deletion: the nodes that never
			// saw the brake forget the vanishings it was for too.
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: StormKey, Index: p.ModifyIndex}},
				&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: StormLiftedKey, Value: lifted.Encode()}},
				AuditOp(AuditEvent{At: now, Node: "-", Actor: by, Action: "resume", Reason: reason}))
		case strings.HasPrefix(p.Key, DropsPrefix) && unit == "":
			out.Drops++
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: p.Key, Index: p.ModifyIndex}})
		}
	}
	if len(ops) == 0 {
		return out, nil
	}
	if len(ops) > 64 {
		return Lifted{}, errors.New("too much to resume in one transaction (more than 64 keys under mariposa/control/): resume unit by unit with -group")
	}
	ok, _, _, err := client.Txn().Txn(ops, nil)
	if err != nil {
		return Lifted{}, err
	}
	if !ok {
		return Lifted{}, errors.New("mariposa/control/ changed while resuming; run mariposa resume again")
	}
	return out, nil
}

// ReadQueue lists every node's intents (mariposa queue), sorted by node
// and time; corrupt lists are reported in problems.
func ReadQueue(client *api.Client) ([]Intent, map[string]string, error) {
	pairs, _, err := client.KV().List(Prefix+"nodes/", &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return nil, nil, err
	}
	var out []Intent
	problems := map[string]string{}
	for _, p := range pairs {
		if !strings.HasSuffix(p.Key, "/intents") {
			continue
		}
		var list []Intent
		if err := json.Unmarshal(p.Value, &list); err != nil {
			problems[p.Key] = err.Error()
			continue
		}
		out = append(out, list...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Since.Before(out[j].Since)
	})
	return out, problems, nil
}

// DropIntent drops queue entry id (a held restart: the instance stays down)
// with its record. Claims, reschedules and updates are planned again at the
// resume, so dropping one would not hold: only restarts can be dropped (to
// keep an instance off a new spec, deploy the old one).
func DropIntent(client *api.Client, id, by string) (Intent, error) {
	queue, _, err := ReadQueue(client)
	if err != nil {
		return Intent{}, err
	}
	i := slices.IndexFunc(queue, func(in Intent) bool { return in.ID == id })
	if i < 0 {
		return Intent{}, fmt.Errorf("no queue entry %q: mariposa queue lists them", id)
	}
	in := queue[i]
	if in.Kind != "restart" {
		return Intent{}, fmt.Errorf("%s %s is planned again at the resume; only restarts can be dropped", in.Kind, in.Target)
	}
	now := time.Now().UTC()
	b, _ := json.Marshal(Drop{By: by, At: now})
	ok, _, _, err := client.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: DropsPrefix + id, Value: b}},
		AuditOp(AuditEvent{At: now, Node: in.Node, Actor: by, Service: in.Target, Action: "queue-drop", From: in.Kind,
			Reason: in.Detail}),
	}, nil)
	if err != nil {
		return Intent{}, err
	}
	if !ok {
		return Intent{}, errors.New("the drop was not written; run it again")
	}
	return in, nil
}

// parsePauses reads the pauses and drops under control/.
func parsePauses(pairs api.KVPairs, report func(key, msg string, err error)) (map[string]PauseRecord, map[string]Drop) {
	pauses, drops := map[string]PauseRecord{}, map[string]Drop{}
	for _, p := range pairs {
		switch {
		case p.Key == PauseAllKey || strings.HasPrefix(p.Key, PausePrefix):
			var r PauseRecord
			if err := json.Unmarshal(p.Value, &r); err != nil {
				// Safety first: a pause nobody can read still pauses.
				report(p.Key, "a corrupt pause record; treating it as a pause of everything (mariposa resume deletes it)", err)
				r = PauseRecord{Scope: PauseAll, Reason: "a corrupt pause record", Actor: "?"}
			}
			pauses[strings.TrimPrefix(strings.TrimPrefix(p.Key, PauseAllKey), PausePrefix)] = r
		case strings.HasPrefix(p.Key, DropsPrefix):
			var d Drop
			if err := json.Unmarshal(p.Value, &d); err != nil {
				report(p.Key, "a corrupt queue drop; ignoring it", err)
				continue
			}
			drops[strings.TrimPrefix(p.Key, DropsPrefix)] = d
		}
	}
	return pauses, drops
}

// pauseFuncOf is the PauseFunc of node under pauses and drops (nil: none
// paused).
func pauseFuncOf(pauses map[string]PauseRecord, drops map[string]Drop, node string) supervisor.PauseFunc {
	if len(pauses) == 0 {
		return nil
	}
	return func(svc *schema.Service, slot *supervisor.SlotInfo) supervisor.Pause {
		unit, target := svc.Name, svc.Name
		if slot != nil {
			unit, target = slot.Unit, svc.Name+"@"+slot.Name()
		} else if svc.Group != "" {
			unit = svc.Group
		}
		r, ok := pauses[""]
		if !ok || !r.covers(PauseAll) {
			if r, ok = pauses[unit]; !ok || !r.covers(PauseAll) {
				return supervisor.Pause{}
			}
		}
		p := supervisor.Pause{Why: r.Why()}
		if d, ok := drops[intentID(node, "restart", target)]; ok {
			p.Dropped = d.By
		}
		return p
	}
}
