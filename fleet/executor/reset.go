package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// A failed slot, mariposa reset, the pause's held restarts and the node's
// queue (fleet/agent/reset.go and intents.go decide them).

// RestartHolder is what Instances may also do: hold the automatic restarts
// of a slot's instances while the fleet or its unit is paused with scope
// all (agent.HoldRestarts: Why "" lets them go again; Dropped names the
// targets whose held restart the operator dropped: they stay down). An
// Instances without it holds no restart: a paused fleet then restarts what
// crashes. Called from the loop; must return at once. A supervisor's
// runner takes one PauseFunc for all its instances: cluster.Control's
// PauseFunc (of the same answer of control/, as FollowPauses gives it) also
// covers the node's services outside the slots.
type RestartHolder interface {
	HoldRestarts(h agent.HoldRestarts)
}

// InstanceFailed reports that the node's supervisor gave up on the slot's
// instance (its restarts exhausted): the slot fails until mariposa reset,
// or moves to another node (restart.on_exhausted = "reschedule").
func (e *Executor) InstanceFailed(slot agent.SlotID, reason string) {
	e.ServiceFailed(slot, "", reason)
}

// ServiceFailed is InstanceFailed naming the service that failed (a
// supervisor.Event's Service: a group's member fails the group). The
// slot's reschedule history is read first (agent.InstanceFailed.History;
// unread after Request and three tries: none).
func (e *Executor) ServiceFailed(slot agent.SlotID, service, reason string) {
	go func() {
		var hist []placement.RescheduleEvent
		for try := 0; try < 3; try++ {
			ctx, cancel := e.request()
			p, _, err := e.cfg.Client.KV().Get(slot.RescheduleHistoryKey(), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
			cancel()
			if err == nil {
				if p != nil {
					hist = agent.ParseRescheduleHistory(p.Value)
				}
				break
			}
			e.log.Debug("cannot read a slot's reschedule history", "slot", slot.String(), "error", err)
			if !sleep(e.ctx, time.Second) {
				return
			}
		}
		e.inbox.post(agent.InstanceFailed{Slot: slot, Service: service, Reason: reason, History: hist})
	}()
}

// rescheduleOps: a reschedule's release also writes the node's penalty
// (cluster.PenaltyKey, as cluster.ParsePenalties reads it) and the slot's
// history (its "reschedule" audit record rides in the release:
// agent.Audits), and its slot value carries the history
// (cluster.SlotValue's reschedules).
// A slot whose history is exhausted (Failed too) gets the penalty and
// the history, and failOps' "fail" record instead; a slot that moves,
// its reschedule delay's mark in the unit's index (agent.DelayKey) and
// its guard (agent.DelayGuardKey).
func (e *Executor) rescheduleOps(a agent.Release) api.TxnOps {
	r := a.Reschedule
	ops := api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVSet, Key: cluster.PenaltyKey(a.Slot.Unit, e.cfg.Node), Value: r.EncodePenalty()}),
		kv(&api.KVTxnOp{Verb: api.KVSet, Key: a.Slot.RescheduleHistoryKey(), Value: r.EncodeHistory()}),
	}
	if !r.After.IsZero() && a.Failed == nil {
		// The delay before the next claim, in the unit's index (every
		// view that shows the slot free shows it), and its guard.
		ops = append(ops, kv(&api.KVTxnOp{Verb: api.KVSet, Key: a.Slot.DelayKey(r.After)}),
			kv(&api.KVTxnOp{Verb: api.KVSet, Key: a.Slot.DelayGuardKey(), Value: []byte(r.After.UTC().Format(time.RFC3339Nano))}))
	}
	// Its "reschedule" record is the agent's, riding in this release
	// (agent.Audits), as a failed one's "fail" is failOps'.
	return ops
}

// rescheduledValue is the released (or failed) slot value of a
// reschedule, with its history.
func rescheduledValue(node string, a agent.Release, at time.Time) []byte {
	state := cluster.SlotReleased
	if a.Failed != nil {
		state = cluster.SlotFailed
	}
	b, _ := json.Marshal(cluster.SlotValue{Node: node, State: state, Since: at.UTC(), Reason: "rescheduled: " + a.Reschedule.Reason, Reschedules: a.Reschedule.History})
	return b
}

// RestartHeld reports that the slot's instances hold a restart of target
// ("<service>@<unit>/<k>") back for the pause; detail what it would do (""
// no longer held). It goes in the node's queue (mariposa queue).
func (e *Executor) RestartHeld(slot agent.SlotID, target, detail string) {
	e.inbox.post(agent.RestartHeld{Slot: slot, Target: target, Detail: detail})
}

// failOps: a failed slot's release also sets its failed mark, with the
// decision's audit record, in the same transaction.
func (e *Executor) failOps(a agent.Release) api.TxnOps {
	return api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVSet, Key: cluster.FailedKey(a.Slot.Unit, a.Slot.K), Value: a.Failed.Encode()}),
		e.auditOp(agent.Record{Slot: a.Slot, Action: "fail", Reason: a.Failed.Reason}),
	}
}

// actQueue performs the queue's actions; false: not one of them.
func (e *Executor) actQueue(a any, audit []agent.Record) bool {
	switch a := a.(type) {
	case agent.HoldRestarts:
		if h, ok := e.cfg.Instances.(RestartHolder); ok {
			h.HoldRestarts(a)
		}
	case agent.PublishIntents:
		go e.publishIntents(a, audit)
	default:
		return false
	}
	return true
}

// publishIntents writes the node's queue (deletes it when empty); the
// "queue" record is logged, not written (agent.Audits): a report, not a
// decision.
func (e *Executor) publishIntents(a agent.PublishIntents, audit []agent.Record) {
	op := &api.KVTxnOp{Verb: api.KVDelete, Key: cluster.IntentsKey(e.cfg.Node)}
	if len(a.List) > 0 {
		b, _ := json.Marshal(a.List)
		op = &api.KVTxnOp{Verb: api.KVSet, Key: cluster.IntentsKey(e.cfg.Node), Value: b}
	}
	ops := api.TxnOps{kv(op)}
	for _, r := range audit {
		ops = append(ops, e.auditOp(r))
	}
	ok, _, err := e.txn(ops)
	if err == nil && !ok {
		err = errors.New("refused")
	}
	if err != nil {
		e.log.Warn("could not publish the node's queue", "error", err)
	}
	e.inbox.post(agent.IntentsPublished{List: a.List, OK: err == nil})
}

// ResetSlot clears a failed slot (mariposa reset UNIT/K) of a fleet the
// step machine runs: its failed mark deleted, check-index on the mark as
// read, with its audit record, in one transaction (cluster.ResetSlot does
// the same for an older mariposa's failed slot key). The nodes hear it
// with their answer of control/, and the best-ranked one claims the slot.
func ResetSlot(client *api.Client, unit string, k int, by string) error {
	key := cluster.FailedKey(unit, k)
	p, _, err := client.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("slot %s/%d has not failed: nothing to reset", unit, k)
	}
	var r cluster.FailedRecord
	_ = json.Unmarshal(p.Value, &r) // a corrupt mark is reset too
	now := time.Now().UTC()
	ok, _, _, err := client.Txn().Txn(api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVDeleteCAS, Key: key, Index: p.ModifyIndex}),
		// The history goes with it (cluster.ResetSlot clears it too).
		kv(&api.KVTxnOp{Verb: api.KVDelete, Key: agent.SlotID{Unit: unit, K: k}.RescheduleHistoryKey()}),
		cluster.AuditOp(cluster.AuditEvent{At: now, Node: "-", Actor: by, Service: unit, Slot: fmt.Sprintf("%s/%d", unit, k),
			Action: "reset", From: cluster.SlotFailed, To: cluster.SlotReleased, Reason: r.Reason}),
	}, nil)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the slot changed while it was being reset; look again with mariposa why")
	}
	return nil
}

// watchResumed: a watch whose query failed answers again (posted before
// that answer).
type watchResumed struct{ watch string }

// resumed tells the agent its views may have skipped states
// (agent.WatchResumed: the next answer of each unit says nothing of who
// held a slot it shows lost). The agent's controls are what need it; an
// agent without them takes no such input.
func (e *Executor) resumed(in watchResumed) {
	if !e.cfg.Control || e.cfg.Faults.NoResume {
		return
	}
	e.log.Debug("a watch answers again after failing", "watch", in.watch)
	e.step(agent.WatchResumed{})
}
