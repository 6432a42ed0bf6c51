package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// Rolling updates, first step (CLUSTER.md section 5, items 2-4): when a
// unit's definition changes (not its placement alone) and its update block
// has max_parallel > 0, each holder replaces its instance only under a
// token of rollout/<unit>/<run-hash>/tokens, a Consul semaphore with limit
// max_parallel whose contender is the slot's own session (so a token dies
// with its holder), then waits until the new instance is healthy for
// min_healthy_time (running, and with health_check = "checks" every check
// passing) before it gives the token back. So never more than count
// instances run, and never more than max_parallel are being replaced. An
// instance not healthy within healthy_deadline marks the rollout failed
// (rollout/<unit>/<run-hash>/failed, with its audit record, one txn): no
// holder starts that version after it, and the instances still on the old
// one stay untouched. Canaries, promotion, auto_revert, progress_deadline
// and the deployment's own state are the next steps.

// RolloutPrefix is where rollouts keep their tokens and failures.
const RolloutPrefix = Prefix + "rollout/"

// runHash identifies how a unit's instances run: its services without
// their placement.
func runHash(u UnitSpec) string {
	var svcs []schema.Service
	for _, s := range u.Services {
		c := *s
		c.Placement = nil
		svcs = append(svcs, c)
	}
	b, _ := json.Marshal(svcs)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// sameRun: a and b run their instances the same way.
func sameRun(a, b UnitSpec) bool { return runHash(a) == runHash(b) }

// rolling: moving from cur to next goes through a rolling update.
func rolling(cur, next UnitSpec) bool {
	p := next.Unit.Placement
	return p != nil && p.Update.MaxParallel > 0 && !sameRun(cur, next)
}

func rolloutFailedKey(unit, hash string) string { return RolloutPrefix + unit + "/" + hash + "/failed" }

// update replaces slot id's instance with next's under a rollout token.
func (f *Fleet) update(ctx context.Context, id string, h *heldSlot, next UnitSpec) {
	defer func() {
		f.mu.Lock()
		h.updating = false
		f.mu.Unlock()
		f.wake()
	}()
	p := next.Unit.Placement
	hash := runHash(next)
	log := f.log.With("slot", id, "version", hash)
	failed := func() bool {
		pair, _, err := f.cfg.Client.KV().Get(rolloutFailedKey(next.Unit.Name, hash), &api.QueryOptions{RequireConsistent: true})
		return err == nil && pair != nil
	}
	if failed() {
		if f.markFailed(h, hash) {
			log.Warn("this version's rollout failed; the instance stays on its version")
		}
		return
	}
	sem, err := f.cfg.Client.SemaphoreOpts(&api.SemaphoreOptions{
		Prefix: RolloutPrefix + next.Unit.Name + "/" + hash + "/tokens", Limit: p.Update.MaxParallel,
		Session: h.term.Session, SemaphoreWaitTime: 5 * time.Second,
	})
	if err != nil {
		log.Warn("rollout: no semaphore", "error", err)
		return
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-h.term.Lost():
		}
		close(stop)
	}()
	lost, err := sem.Acquire(stop)
	if err != nil || lost == nil {
		if err != nil {
			log.Debug("rollout: no token yet", "error", err)
		}
		return
	}
	defer func() { _ = sem.Release() }()
	if failed() {
		return
	}
	f.mu.Lock()
	if f.held[id] != h {
		f.mu.Unlock()
		return
	}
	// A newer spec may have come while this waited for its token: start
	// over with it rather than roll out one already superseded.
	cur, ok := f.unitsLocked()[next.Unit.Name]
	if !ok || runHash(cur) != hash {
		f.mu.Unlock()
		log.Debug("rollout: superseded while waiting for a token")
		return
	}
	next = cur
	h.unit = next
	f.mu.Unlock()
	log.Info("rollout: replacing the instance")
	f.applyHeld(ctx)

	if ok, why := f.waitHealthy(ctx, id, next, lost); !ok {
		if ctx.Err() != nil {
			return
		}
		now := f.cfg.Now()
		b, _ := json.Marshal(map[string]any{"at": now, "node": f.cfg.Node, "slot": id, "reason": why})
		_, _, _, err := f.cfg.Client.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: rolloutFailedKey(next.Unit.Name, hash), Value: b}},
			AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Service: next.Unit.Name, Slot: id, Action: "rollout-failed",
				To: hash, Reason: why, TermIndex: h.term.Index}),
		}, nil)
		f.markFailed(h, hash)
		log.Error("rollout failed: no more instances move to this version", "reason", why, "error", err)
		return
	}
	log.Info("rollout: instance healthy on the new version")
}

// markFailed notes that the rollout of version hash failed, so that h is
// not updated to it again; true the first time.
func (f *Fleet) markFailed(h *heldSlot, hash string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.failedSeen[hash] {
		return false
	}
	if h.failedSeen == nil {
		h.failedSeen = map[string]bool{}
	}
	h.failedSeen[hash] = true
	return true
}

// waitHealthy waits until slot id's instances of u are healthy for
// min_healthy_time, or healthy_deadline passes.
func (f *Fleet) waitHealthy(ctx context.Context, id string, u UnitSpec, lost <-chan struct{}) (bool, string) {
	up := u.Unit.Placement.Update
	deadline := time.Now().Add(up.HealthyDeadline)
	var since time.Time
	var pids []int
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	why := "not started"
	for {
		healthy, cur, w := slotHealthy(f.cfg.Runner.Snapshots(), id, u, up.HealthCheck)
		switch {
		case !healthy:
			since, why = time.Time{}, w
		case since.IsZero() || fmt.Sprint(cur) != fmt.Sprint(pids):
			since, pids = time.Now(), cur
		case time.Since(since) >= up.MinHealthyTime:
			return true, ""
		}
		if time.Now().After(deadline) {
			return false, fmt.Sprintf("not healthy within healthy_deadline (%s): %s", up.HealthyDeadline, why)
		}
		select {
		case <-ctx.Done():
			return false, "stopping"
		case <-lost:
			return false, "the rollout token was lost"
		case <-tick.C:
		}
	}
}

// slotHealthy says whether every member of u runs in slot id and is
// healthy per health_check, with their PIDs, or why not.
func slotHealthy(snaps []supervisor.Snapshot, id string, u UnitSpec, mode string) (bool, []int, string) {
	var pids []int
	for _, svc := range u.Services {
		var sn *supervisor.Snapshot
		for i := range snaps {
			if snaps[i].Slot == id && snaps[i].Service == svc.Name {
				sn = &snaps[i]
			}
		}
		switch {
		case sn == nil:
			return false, nil, svc.Name + " not started"
		case sn.State != supervisor.StateRunning:
			return false, nil, fmt.Sprintf("%s %s", svc.Name, sn.State)
		case mode == schema.UpdateChecks && !sn.ChecksPassing:
			return false, nil, svc.Name + "'s checks not passing"
		}
		pids = append(pids, sn.PID)
	}
	return true, pids, ""
}
