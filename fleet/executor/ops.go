package executor

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// The deployments' and the controls' actions (fleet/agent/deploy.go and
// ops.go decide them), with the operations of fleet/sim's actDeploy,
// writeBrake, checkHeld and publishDrain.

// delayOps are a claim's operations for the reschedule delay (agent's
// DelayGuardKey): with the marks its view showed, their deletion and the
// guard's; without, the guard's check-not-exists, so that a claim on a
// view older than a reschedule's release is refused (Taken) while the
// delay runs. fleet/sim's delayOps.
func delayOps(a agent.Claim) api.TxnOps {
	if len(a.Delays) == 0 {
		return api.TxnOps{kv(&api.KVTxnOp{Verb: api.KVCheckNotExists, Key: a.Slot.DelayGuardKey()})}
	}
	ops := api.TxnOps{kv(&api.KVTxnOp{Verb: api.KVDelete, Key: a.Slot.DelayGuardKey()})}
	for _, k := range a.Delays {
		ops = append(ops, kv(&api.KVTxnOp{Verb: api.KVDelete, Key: k}))
	}
	return ops
}

// auditOp is the decision's audit record, in the decision's transaction.
func (e *Executor) auditOp(r agent.Record) *api.TxnOp { return e.auditOpAt(r, 0) }

// auditOpAt is auditOp for a decision of the slot's holder under fencing
// token index (term_index, website/operations.md).
func (e *Executor) auditOpAt(r agent.Record, index uint64) *api.TxnOp {
	slot := ""
	if r.Slot.K >= 0 && r.Slot.Unit != "" {
		slot = r.Slot.String()
	}
	ev := cluster.AuditEvent{At: time.Now(), Node: e.cfg.Node, Service: r.Slot.Unit, Slot: slot,
		Action: r.Action, From: r.From, To: r.To, Reason: r.Reason, TermIndex: index}
	switch r.Action {
	case "release":
		// What moved (website/operations.md: this node -> released).
		ev.From, ev.To = e.cfg.Node, cluster.SlotReleased
	case "claim":
		// The previous holder (Record.From, where the agent knows it)
		// -> this node.
		ev.To = e.cfg.Node
	case "fail":
		ev.From, ev.To = e.cfg.Node, cluster.SlotFailed
	case "reschedule":
		// released, or failed once the reschedules are used up (the
		// release sets To).
		ev.From = e.cfg.Node
		if ev.To == "" {
			ev.To = cluster.SlotReleased
		}
	}
	if r.Deployment != "" {
		ev.Service, ev.Slot = r.Deployment, r.Slot.Unit
	}
	return cluster.AuditOp(ev)
}

// claimOpsFor is a claim's transaction (fleet/sim's claimOpsFor): a slot
// the view showed released keeps its mark until the claim (get fails on a
// missing key: someone claimed it since); a takeover spends the budget by
// compare-and-set of control/takeovers, the last op.
func (e *Executor) claimOpsFor(a agent.Claim, at time.Time, audit ...agent.Record) api.TxnOps {
	ops := claimOps(a.Slot, a.Node, a.Session, at)
	if a.Released {
		ops = append(ops[:2], append(api.TxnOps{kv(&api.KVTxnOp{Verb: api.KVGet, Key: a.Slot.ReleasedKey()})}, ops[2:]...)...)
	}
	if a.Fresh {
		// A slot never claimed: its ClaimedKey must not exist (the first op).
		ops = append(api.TxnOps{kv(&api.KVTxnOp{Verb: api.KVCheckNotExists, Key: a.Slot.ClaimedKey()})}, ops...)
	}
	ops = append(ops, delayOps(a)...)
	// The claim's audit record goes in its transaction, before
	// the failed mark's check and the budget's compare-and-set, which
	// stay the last ops (Claim.FailedOp, Claim.Refusal): the agent's
	// (agent.Audits: its rank, a takeover's "takeover from a lost
	// node"), or, without one, a plain claim.
	if len(audit) == 0 {
		why := "claimed"
		if a.Takeover != nil {
			why = "takeover from a lost node"
		}
		audit = []agent.Record{{Slot: a.Slot, Action: "claim", Reason: why}}
	}
	for _, r := range audit {
		ops = append(ops, e.auditOp(r))
	}
	if a.CheckFailed {
		// The slot's failed mark must not exist (reset.go; Claim.FailedOp).
		ops = append(ops, kv(&api.KVTxnOp{Verb: api.KVCheckNotExists, Key: cluster.FailedKey(a.Slot.Unit, a.Slot.K)}))
	}
	if t := a.Takeover; t != nil && t.Logged {
		ops = append(ops, kv(&api.KVTxnOp{Verb: api.KVCAS, Key: cluster.TakeoversKey, Index: t.Index, Value: t.Log.Encode()}))
	}
	return ops
}

// txn runs ops (a write): ok, the results, or an error (no answer: it may
// have been applied).
func (e *Executor) txn(ops api.TxnOps) (bool, *api.TxnResponse, error) {
	ctx, cancel := e.request()
	defer cancel()
	ok, r, _, err := e.cfg.Client.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err == nil && r == nil {
		err = errShortRead
	}
	return ok, r, err
}

// resultIndex is the ModifyIndex of key among a transaction's results (0:
// none).
func resultIndex(r *api.TxnResponse, key string) uint64 {
	if r == nil {
		return 0
	}
	for _, res := range r.Results {
		if res.KV != nil && res.KV.Key == key {
			return res.KV.ModifyIndex
		}
	}
	return 0
}

// takeToken performs agent.TakeToken: lock the token if the session still
// holds the slot.
func (e *Executor) takeToken(a agent.TakeToken) {
	key := agent.TokenKey(a.Slot.Unit, a.T)
	ok, r, err := e.txn(api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVCheckSession, Key: a.Slot.Key(), Session: a.Session}),
		kv(&api.KVTxnOp{Verb: api.KVLock, Key: key, Session: a.Session, Value: []byte(strconv.Itoa(a.Slot.K))}),
	})
	done := agent.TokenDone{Slot: a.Slot, T: a.T}
	if err == nil && ok {
		if idx := resultIndex(r, key); idx != 0 {
			done.OK, done.Index = true, idx
		}
	}
	e.inbox.post(sessionAns{session: a.Session, in: done})
}

// returnToken performs agent.ReturnToken: delete the token if the session
// holds it and it is still the take it returns (delete-cas).
func (e *Executor) returnToken(a agent.ReturnToken) {
	key := agent.TokenKey(a.Slot.Unit, a.T)
	ok, _, err := e.txn(api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVCheckSession, Key: key, Session: a.Session}),
		kv(&api.KVTxnOp{Verb: api.KVDeleteCAS, Key: key, Index: a.Index}),
	})
	e.inbox.post(sessionAns{session: a.Session, in: agent.ReturnDone{Slot: a.Slot, T: a.T, OK: err == nil && ok, Index: a.Index}})
}

// publish performs agent.Publish: the status, fenced by the session and
// the fencing token on the slot's lock key (not written), with its audit
// record.
func (e *Executor) publish(a agent.Publish) {
	b, _ := json.Marshal(a.Status)
	ok, _, err := e.txn(api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVCheckSession, Key: a.Slot.Key(), Session: a.Session}),
		kv(&api.KVTxnOp{Verb: api.KVCheckIndex, Key: a.Slot.Key(), Index: a.Index}),
		kv(&api.KVTxnOp{Verb: api.KVLock, Key: a.Slot.StatusKey(), Session: a.Session, Value: b}),
		e.auditOpAt(a.Audit, a.Index),
	})
	if err != nil || !ok {
		e.log.Debug("publish refused or unanswered", "slot", a.Slot.String(), "kind", a.Kind, "error", err)
	}
	e.inbox.post(sessionAns{session: a.Session, in: agent.PublishDone{Slot: a.Slot, Kind: a.Kind, Version: a.Status.Version, Index: a.Index, OK: err == nil && ok}})
}

// moveDeployment performs agent.MoveDeployment: the record, check-index on
// the one the judge read, with its audit record.
func (e *Executor) moveDeployment(a agent.MoveDeployment) {
	if f := e.cfg.Faults.BeforeMove; f != nil {
		f(a)
	}
	b, _ := json.Marshal(a.Next)
	var ops api.TxnOps
	if !e.cfg.Faults.NoDeployCAS {
		ops = append(ops, kv(&api.KVTxnOp{Verb: api.KVCheckIndex, Key: agent.RecordKey(a.Unit), Index: a.CAS}))
	}
	ops = append(ops, kv(&api.KVTxnOp{Verb: api.KVSet, Key: agent.RecordKey(a.Unit), Value: b}), e.auditOp(a.Audit))
	if a.Also.Action != "" {
		ops = append(ops, e.auditOp(a.Also)) // a revert's, after its deploy-failed
	}
	ok, _, err := e.txn(ops)
	if err != nil || !ok {
		e.log.Debug("deployment move refused or unanswered", "unit", a.Unit, "action", a.Audit.Action, "error", err)
	}
	e.inbox.post(agent.MoveDone{Unit: a.Unit, OK: err == nil && ok})
}

// writeBrake performs agent.WriteBrake: create control/storm unless it
// exists or a resume came since the node's view (control/storm-lifted
// moved).
func (e *Executor) writeBrake(a agent.WriteBrake) {
	ok, r, err := e.txn(api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVCheckNotExists, Key: cluster.StormKey}),
		kv(cluster.StormLiftedCheck(a.Lifted)),
		kv(&api.KVTxnOp{Verb: api.KVSet, Key: cluster.StormKey, Value: a.Record.Encode()}),
		// Its audit record, in the same transaction.
		e.auditOp(agent.Record{Slot: agent.SlotID{K: -1}, Action: "storm-brake",
			Reason: a.Record.Reason() + "; takeovers of lost slots paused until mariposa resume"}),
	})
	switch {
	case err != nil:
		e.inbox.post(agent.BrakeDone{Err: err})
	case !ok:
		e.inbox.post(agent.BrakeDone{})
	default:
		e.inbox.post(agent.BrakeDone{OK: true, Index: resultIndex(r, cluster.StormKey)})
	}
}

// publishDrain performs agent.PublishDrain.
func (e *Executor) publishDrain(a agent.PublishDrain, audit []agent.Record) {
	b, _ := json.Marshal(a.Status)
	ops := api.TxnOps{kv(&api.KVTxnOp{Verb: api.KVSet, Key: agent.DrainStatusKey(e.cfg.Node), Value: b})}
	for _, r := range audit {
		ops = append(ops, e.auditOp(r)) // "drain-status", with it
	}
	ok, _, err := e.txn(ops)
	e.inbox.post(agent.DrainPublished{Status: a.Status, OK: err == nil && ok})
}

// checkHeld performs agent.CheckHeld: consistent reads of the slot keys.
func (e *Executor) checkHeld(a agent.CheckHeld) {
	ctx, cancel := e.request()
	defer cancel()
	held, err := e.readHeld(ctx, a.Slots, a.Session)
	e.inbox.post(sessionAns{session: a.Session, in: agent.HeldChecked{Held: held, Err: err}})
}

// readHeld reads the slot keys (get-or-empty, consistent, 128 per
// transaction, all at once): which the session holds; any failure fails
// the whole.
func (e *Executor) readHeld(ctx context.Context, slots []agent.SlotID, session string) (map[agent.SlotID]bool, error) {
	type part struct {
		held map[agent.SlotID]bool
		err  error
	}
	parts := make(chan part, len(slots)/maxTxnOps+1)
	n := 0
	for from := 0; from < len(slots); from += maxTxnOps {
		chunk := slots[from:min(from+maxTxnOps, len(slots))]
		n++
		go func() {
			ops := make(api.TxnOps, 0, len(chunk))
			for _, id := range chunk {
				ops = append(ops, kv(&api.KVTxnOp{Verb: api.KVGetOrEmpty, Key: id.Key()}))
			}
			ok, r, _, err := e.cfg.Client.Txn().Txn(ops, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
			if err == nil && (!ok || r == nil || len(r.Results) != len(chunk)) {
				err = errShortRead
			}
			if err != nil {
				parts <- part{err: err}
				return
			}
			held := map[agent.SlotID]bool{}
			for i, id := range chunk {
				held[id] = r.Results[i].KV != nil && r.Results[i].KV.Session == session
			}
			parts <- part{held: held}
		}()
	}
	out := map[agent.SlotID]bool{}
	var err error
	for range n {
		p := <-parts
		if p.err != nil && err == nil {
			err = p.err
		}
		for id, h := range p.held {
			out[id] = h
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// watchControl follows control/ (pauses, drains, the storm brake, the
// takeover log): agent.ControlAnswer.
func (e *Executor) watchControl() {
	answered := false
	e.watch(e.ctx, "control", func(q *api.QueryOptions) (uint64, func(), error) {
		pairs, meta, err := e.cfg.Client.KV().List(cluster.ControlPrefix, q)
		if err != nil {
			return 0, nil, err
		}
		if e.cfg.Faults.ControlStale && answered {
			return meta.LastIndex, func() {}, nil
		}
		answered = true
		v := e.controlView(pairs, meta.LastIndex)
		return meta.LastIndex, func() { e.inbox.post(agent.ControlAnswer{View: v}) }, nil
	})
}

// controlView is control/'s keys at index, as the agent takes them (a
// corrupt key reported).
func (e *Executor) controlView(pairs api.KVPairs, index uint64) *agent.ControlView {
	return &agent.ControlView{Index: index, Control: cluster.ParseControl(pairs, func(key, msg string, err error) {
		e.log.Warn("control/: "+msg, "key", key, "error", err)
	})}
}

// failedOps are the indexes of a transaction's failed ops.
func failedOps(errs api.TxnErrors) []int {
	out := make([]int, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.OpIndex)
	}
	return out
}

// awaitSuccessor performs agent.AwaitSuccessor: blocking queries on the
// health of each of the slot's services until its instance (<service>-<k>)
// passes on another node (cluster/drain.go); it gives up
// after successorWait (the agent's handoff timeout bounds the wait too).
// One at a time per node (a drain moves one slot at a time), so it holds
// no place of the request budget, as a watch does not.
func (e *Executor) awaitSuccessor(a agent.AwaitSuccessor) {
	ctx, cancel := context.WithTimeout(e.ctx, successorWait)
	defer cancel()
	if f := e.cfg.SuccessorPasses; f != nil {
		f(ctx, a.Slot, a.Services)
		if e.ctx.Err() == nil {
			e.inbox.post(agent.SuccessorPassing{Slot: a.Slot})
		}
		return
	}
	for _, svc := range a.Services {
		want := svc + "-" + strconv.Itoa(a.Slot.K)
		var index uint64
		for {
			es, meta, err := e.cfg.Client.Health().Service(svc, "", true,
				(&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(ctx))
			if ctx.Err() != nil {
				if e.ctx.Err() == nil {
					e.log.Warn("drain: the slot's new instance did not pass in time; going on", "slot", a.Slot.String())
					e.inbox.post(agent.SuccessorPassing{Slot: a.Slot})
				}
				return
			}
			if err != nil {
				sleep(ctx, time.Second)
				continue
			}
			if slices.ContainsFunc(es, func(se *api.ServiceEntry) bool {
				return se.Service != nil && se.Node != nil && se.Service.ID == want && se.Node.Node != e.cfg.Node
			}) {
				break
			}
			index = advance(index, meta.LastIndex)
		}
	}
	e.inbox.post(agent.SuccessorPassing{Slot: a.Slot})
}

// successorWait bounds awaitSuccessor (the agent's handoff timeout).
const successorWait = 2 * time.Minute
