package executor

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// maxTxnOps is Consul's limit of operations in one transaction.
const maxTxnOps = 128

// slotValue is the slot key's value (cluster.SlotValue), written by the
// claim and the release only, never while held.
func slotValue(node, state, reason string, at time.Time) []byte {
	b, _ := json.Marshal(cluster.SlotValue{Node: node, State: state, Since: at.UTC(), Reason: reason})
	return b
}

func kv(op *api.KVTxnOp) *api.TxnOp { return &api.TxnOp{KV: op} }

// claimOps lock the slot key and its index entry with the session and
// clear the slot's released mark, all or nothing (fleet/sim's claimOps):
// the lock on the slot key is what makes one holder; the index is what the
// nodes watch.
func claimOps(id agent.SlotID, node, session string, at time.Time) api.TxnOps {
	return api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVLock, Key: id.Key(), Session: session, Value: slotValue(node, cluster.SlotHeld, "", at)}),
		kv(&api.KVTxnOp{Verb: api.KVLock, Key: id.IndexKey(node), Session: session}),
		kv(&api.KVTxnOp{Verb: api.KVDelete, Key: id.ReleasedKey()}),
		// Named: when an invalidation deletes the slot key, this still
		// says who held it (cluster.ReadState: status shows it lost).
		kv(&api.KVTxnOp{Verb: api.KVSet, Key: id.ClaimedKey(), Value: []byte(node)}),
	}
}

// releaseOps unlock the slot key, delete its index entry, mark it released
// and move the unit's vacancy key, all or nothing (fleet/sim's
// releaseOps): refused unless the session holds the key.
func releaseOps(id agent.SlotID, node, session string, at time.Time) api.TxnOps {
	return api.TxnOps{
		kv(&api.KVTxnOp{Verb: api.KVUnlock, Key: id.Key(), Session: session, Value: slotValue(node, cluster.SlotReleased, "released by its holder", at)}),
		kv(&api.KVTxnOp{Verb: api.KVDelete, Key: id.IndexKey(node)}),
		kv(&api.KVTxnOp{Verb: api.KVSet, Key: id.ReleasedKey()}),
		kv(&api.KVTxnOp{Verb: api.KVSet, Key: agent.VacancyKey(id.Unit), Value: []byte(id.String() + " " + node + " " + at.UTC().Format(time.RFC3339Nano))}),
		// What the holder said about its hold goes with it (fleet/sim's
		// releaseOpsWith).
		kv(&api.KVTxnOp{Verb: api.KVDelete, Key: id.StatusKey()}),
	}
}

// request is a request's context, once one of the MaxRequests places is
// free (pool.go); its cancel gives the place back. Never called while
// holding one.
func (e *Executor) request() (context.Context, context.CancelFunc) {
	if !e.requestSlot() {
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		return ctx, cancel
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.Request)
	return ctx, func() { cancel(); e.doneRequest() }
}

// createSession creates the node's session (agent.CreateSession).
func (e *Executor) createSession() {
	ctx, cancel := e.request()
	defer cancel()
	id, _, err := e.cfg.Client.Session().Create(&api.SessionEntry{
		Name:       "mariposa fleet " + e.cfg.Node,
		Node:       e.cfg.Node,
		LockDelay:  e.cfg.LockDelay,
		Behavior:   api.SessionBehaviorDelete,
		TTL:        e.cfg.TTL.String(),
		NodeChecks: e.cfg.Checks,
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		e.log.Debug("cannot create the session", "error", err)
	}
	e.inbox.post(sessionMade{id: id, err: err})
}

// startSession renews the session and watches it until Consul says it is
// gone (sessionGone) or the loop drops it. Called from the loop.
func (e *Executor) startSession(id string) {
	ctx, cancel := context.WithCancel(e.ctx)
	e.sessions[id] = cancel
	go e.renew(ctx, id)
	go e.watchSession(ctx, id)
}

// renew renews the session every TTL/2 (TTL/10 after a failure).
func (e *Executor) renew(ctx context.Context, id string) {
	wait := e.cfg.TTL / 2
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		rctx, cancel := context.WithTimeout(ctx, e.cfg.Request)
		sent := time.Now()
		entry, _, err := e.cfg.Client.Session().Renew(id, (&api.WriteOptions{}).WithContext(rctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			e.log.Debug("cannot renew the session", "session", id, "error", err)
			wait = e.cfg.TTL / 10
		case entry == nil:
			e.inbox.post(sessionGone{id: id})
			return
		default:
			wait = e.cfg.TTL / 2
			// stop_after counts from the last renewal (agent/stopafter.go).
			e.inbox.post(sessionAns{session: id, in: agent.SessionRenewed{Sent: sent}})
		}
	}
}

// watchSession follows the session's entry (a blocking query): its
// disappearance is the session lost, at once rather than at the next
// renewal.
func (e *Executor) watchSession(ctx context.Context, id string) {
	var idx uint64
	for ctx.Err() == nil {
		start := time.Now()
		es, meta, err := e.cfg.Client.Session().Info(id, (&api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Minute}).WithContext(ctx))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			sleep(ctx, time.Second)
			continue
		case es == nil:
			e.inbox.post(sessionGone{id: id})
			return
		}
		idx = advance(idx, meta.LastIndex)
		sleep(ctx, watchEvery-time.Since(start))
	}
}

// checkSession asks Consul whether the session still exists (after a
// refusal that names it invalid).
func (e *Executor) checkSession(id string) {
	ctx, cancel := e.request()
	defer cancel()
	es, _, err := e.cfg.Client.Session().Info(id, (&api.QueryOptions{}).WithContext(ctx))
	if err == nil && es == nil {
		e.inbox.post(sessionGone{id: id})
	}
}

// claim performs agent.Claim. A transport error, a timeout or a server
// error says nothing of whether it was applied: the answer is lost.
func (e *Executor) claim(a agent.Claim, audit []agent.Record) {
	ctx, cancel := e.request()
	defer cancel()
	ops := e.claimOpsFor(a, time.Now(), audit...)
	ok, r, _, err := e.cfg.Client.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	var done agent.ClaimDone
	var notFresh, budget, failed bool
	if err == nil && r != nil && !ok {
		notFresh, budget = a.Refusal(len(ops), failedOps(r.Errors))
		failed = a.FailedRefusal(len(ops), failedOps(r.Errors))
	}
	switch {
	case failed:
		e.log.Debug("claim refused: the slot has failed (mariposa reset clears it)", "slot", a.Slot.String())
		done = agent.ClaimDone{Slot: a.Slot, Failed: true}
	case err != nil || r == nil:
		e.log.Debug("claim: no answer (it may have been applied)", "slot", a.Slot.String(), "error", err)
		done = agent.ClaimDone{Slot: a.Slot, Lost: true}
	case notFresh:
		e.log.Debug("claim refused: the slot was held before (a takeover then)", "slot", a.Slot.String())
		done = agent.ClaimDone{Slot: a.Slot, NotFresh: true}
	case budget:
		e.log.Debug("claim refused: the takeover budget moved", "slot", a.Slot.String())
		done = agent.ClaimDone{Slot: a.Slot, Budget: true}
	case !ok:
		what := ""
		if len(r.Errors) > 0 {
			what = r.Errors[0].What
		}
		e.log.Debug("claim refused", "slot", a.Slot.String(), "what", what)
		delay := strings.Contains(what, "lock delay")
		done = agent.ClaimDone{Slot: a.Slot, LockDelay: delay, Taken: !delay}
		if strings.Contains(what, "invalid session") {
			// Not another session's hold: the view is not stale, and
			// nothing would move it (the agent would wait for a newer one
			// for good). Refused, tried again after a tenth of the lock
			// delay, by when the session's loss is known.
			done = agent.ClaimDone{Slot: a.Slot}
			go e.checkSession(a.Session) // a request of its own: not within this one's place
		}
	case len(r.Results) == 0 || r.Results[0].KV == nil:
		done = agent.ClaimDone{Slot: a.Slot, Lost: true}
	default:
		done = agent.ClaimDone{Slot: a.Slot, OK: true, Index: r.Results[0].KV.ModifyIndex}
		if f := e.cfg.Faults.LoseClaimAnswer; f != nil && f(a.Slot) {
			done = agent.ClaimDone{Slot: a.Slot, Lost: true}
		}
	}
	e.inbox.post(sessionAns{session: a.Session, in: done})
}

// release performs agent.Release.
func (e *Executor) release(a agent.Release, audit []agent.Record) {
	ctx, cancel := e.request()
	defer cancel()
	// The release's audit records go in its transaction: the
	// decision it carries out (Release.Audit, made at the stop) and those
	// of its step (agent.Audits), or a plain "release"; a failed slot's
	// mark and its record too.
	ops := releaseOps(a.Slot, e.cfg.Node, a.Session, time.Now())
	if a.Audit.Action != "" {
		audit = append([]agent.Record{a.Audit}, audit...)
	}
	if len(audit) == 0 && a.Failed == nil {
		audit = []agent.Record{{Slot: a.Slot, Action: "release", Reason: "released"}}
	}
	for _, r := range audit {
		if r.Action == "reschedule" && a.Failed != nil {
			r.To = cluster.SlotFailed // its reschedules used up
		}
		ops = append(ops, e.auditOp(r))
	}
	if a.Failed != nil {
		// The slot value says failed and why (mariposa status, and the
		// e2e tests, read it there).
		ops[0].KV.Value = slotValue(e.cfg.Node, cluster.SlotFailed, a.Failed.Reason, time.Now())
		ops = append(ops, e.failOps(a)...)
	}
	if a.Reschedule != nil {
		ops[0].KV.Value = rescheduledValue(e.cfg.Node, a, time.Now())
		ops = append(ops, e.rescheduleOps(a)...)
	}
	ok, _, _, err := e.cfg.Client.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || !ok {
		e.log.Debug("release refused or unanswered", "slot", a.Slot.String(), "error", err)
	}
	e.inbox.post(sessionAns{session: a.Session, in: agent.ReleaseDone{Slot: a.Slot, OK: err == nil && ok}})
}

type shortRead struct{}

func (shortRead) Error() string { return "confirmation read: refused or incomplete answer" }

var errShortRead error = shortRead{}

// advance is a blocking query's next index: Consul's advice is to start
// again from 0 when the index goes backwards.
func advance(old, got uint64) uint64 {
	if got < old {
		return 0
	}
	return got
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
