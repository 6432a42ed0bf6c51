package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/semaphore"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// Rolling updates, first step (CLUSTER.md section 5, items 2-4): when a
// unit's definition changes (not its placement alone) and its update block
// has max_parallel > 0, each holder replaces its instance only under a
// token of rollout/<unit>/<run-hash>/tokens, a Consul semaphore with limit
// max_parallel whose contender is the slot's own session (so a token dies
// with its holder; internal/semaphore: api.Semaphore's keys, with the
// waiters queued so that a token given back wakes one of them), then waits until the new instance is healthy for
// min_healthy_time (running, and with health_check = "checks" every check
// passing; counted from the checks' own results when mariposa runs them
// all, nextStreak) before it gives the token back. So never more than count
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

// errSuperseded: the version waited for is no longer the one to run.
var errSuperseded = errors.New("superseded by a newer definition")

// update replaces slot id's instance with next's under a rollout token.
func (f *Fleet) update(ctx context.Context, id string, h *heldSlot, next UnitSpec, attempt string) {
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
		if f.markFailed(h, attempt) {
			log.Warn("this version's rollout failed; the instance stays on its version")
		}
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
	// One contender key per slot, <session>/<slot>: a node updates as
	// many of its slots at once as tokens are free (max_parallel bounds
	// the tokens, whoever holds them), and each dies with the session.
	prefix := RolloutPrefix + next.Unit.Name + "/" + hash + "/tokens"
	sem, err := semaphore.New(f.cfg.Client, semaphore.Options{
		Prefix: prefix, Limit: p.Update.MaxParallel, Session: h.term.Session,
		Name: h.term.Session + "/" + strconv.Itoa(h.k),
	})
	if err != nil {
		log.Warn("rollout: no semaphore", "error", err)
		return
	}
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
	// over with it rather than roll out one already superseded. A canary
	// phase or a failed deployment may hold this slot back now, too.
	cur, ok := f.unitsLocked()[next.Unit.Name]
	_, paused := f.pausedLocked(next.Unit.Name, PauseDeploy)
	if !ok || runHash(cur) != hash || f.heldBackLocked(cur, h.k) || paused {
		f.mu.Unlock()
		log.Debug("rollout: superseded or held back while waiting for a token")
		return
	}
	next = cur
	f.mu.Unlock()
	// The slot says what runs in it before it changes: a deployment is
	// never judged on a health the instance had at another version.
	if err := f.restamp(ctx, h, hash); err != nil {
		log.Warn("rollout: the slot's version could not be updated; trying again later", "error", err)
		return
	}
	f.mu.Lock()
	h.unit = next
	f.mu.Unlock()
	log.Info("rollout: replacing the instance")
	from := time.Now()
	f.applyHeld(ctx)

	streak, err := f.waitHealthy(ctx, id, h, next, lost, p.Update.HealthyDeadline, from)
	switch {
	case err == nil:
		// The token's work is done once the instance was healthy for
		// min_healthy_time: the next waiter starts its replacement while
		// this slot's status says so (a Raft write less on every
		// hand-off). The deferred Release then finds nothing to give back.
		_ = sem.Release()
		back := time.Now()
		if err := f.publishHealthy(ctx, id, h, hash, true); err != nil {
			log.Warn("rollout: instance healthy, but its slot could not say so", "error", err)
		}
		// When min_healthy_time started counting, when the catalog first
		// showed the streak passing, and when the token went back (the
		// rollout benchmark's breakdown).
		log.Info("rollout: instance healthy on the new version", "counted_from", streak.since.Format(time.RFC3339Nano),
			"catalog_from", streak.seen.Format(time.RFC3339Nano), "token_back", back.Format(time.RFC3339Nano))
	case ctx.Err() != nil, errors.Is(err, errSuperseded), errors.Is(err, errTokenLost):
		log.Debug("rollout: stopped waiting for health", "reason", err)
	default:
		why := err.Error()
		f.markFailed(h, attempt)
		err := f.failDeployment(ctx, next.Unit.Name, hash, id, why, h.term.Index)
		log.Error("rollout failed: no more instances move to this version", "reason", why, "error", err)
	}
}

// markFailed notes that the rollout attempt (attemptKey) failed, so that
// h is not updated to it again; true the first time.
func (f *Fleet) markFailed(h *heldSlot, attempt string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.failedSeen[attempt] {
		return false
	}
	if h.failedSeen == nil {
		h.failedSeen = map[string]bool{}
	}
	h.failedSeen[attempt] = true
	return true
}

// attemptKeyLocked names one attempt to roll u out: its version within
// the deployment's spec (a new deploy of a version that failed before is
// a new attempt).
func (f *Fleet) attemptKeyLocked(u UnitSpec) string {
	var n uint64
	if name := f.deploymentOfLocked(u.Unit.Name); name != "" {
		n = f.remote[name].Spec.N
	}
	return fmt.Sprintf("%d/%s", n, runHash(u))
}

// heldBackLocked: slot k may not move to u's version now (a canary phase
// not promoted yet, or a failed deployment).
func (f *Fleet) heldBackLocked(u UnitSpec, k int) bool {
	name := f.deploymentOfLocked(u.Unit.Name)
	return name != "" && f.remote[name].holdsBack(u.Unit.Name, k)
}

// errTokenLost: the rollout token went with the session.
var errTokenLost = errors.New("the rollout token was lost")

// waitHealthy waits until slot id's instances of u are healthy for
// min_healthy_time: nil, or why not (errSuperseded once h runs another
// version). deadline 0 waits as long as it takes. from is when the wait
// began (the replacement, for an update): min_healthy_time never counts
// from before it (nextStreak). It returns the streak that lasted.
func (f *Fleet) waitHealthy(ctx context.Context, id string, h *heldSlot, u UnitSpec, lost <-chan struct{}, deadline time.Duration, from time.Time) (healthStreak, error) {
	up := u.Unit.Placement.Update
	hash := runHash(u)
	end := time.Now().Add(deadline)
	var streak healthStreak
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	why := "not started"
	var marked func() bool
	if up.HealthCheck == schema.UpdateManual {
		mctx, cancel := context.WithCancel(ctx)
		defer cancel()
		marked = f.watchMark(mctx, ManualHealthKey(u.Unit.Name, hash, h.k))
	}
	for {
		f.mu.Lock()
		superseded := f.held[id] != h || runHash(h.unit) != hash
		f.mu.Unlock()
		if superseded {
			return streak, errSuperseded
		}
		healthy, cur, local, w := slotHealthy(f.cfg.Runner.Snapshots(), id, u, up.HealthCheck)
		if healthy && marked != nil && !marked() {
			healthy, w = false, "waiting for mariposa deploy health "+id
		}
		if !healthy {
			why = w
		}
		now := time.Now()
		streak = nextStreak(streak, healthy, cur, local, from, now)
		if !streak.since.IsZero() && now.Sub(streak.since) >= up.MinHealthyTime {
			return streak, nil
		}
		if deadline > 0 && now.After(end) {
			return streak, fmt.Errorf("not healthy within healthy_deadline (%s): %s", up.HealthyDeadline, why)
		}
		timer.Reset(healthWait(streak.since, time.Now(), up.MinHealthyTime))
		select {
		case <-ctx.Done():
			return streak, ctx.Err()
		case <-lost:
			return streak, errTokenLost
		case <-timer.C:
		}
	}
}

// healthStreak is what waitHealthy knows of the slot's current healthy
// streak, the one min_healthy_time counts.
type healthStreak struct {
	since time.Time // its start; zero: not healthy at the last look
	seen  time.Time // the look that first saw it healthy
	pids  []int     // the members' processes it is about
	// broke: seen healthy and then not, or restarted, during this wait.
	// From then on a streak counts from the look that saw it healthy
	// again, as the catalog showed it: what passed on the node while the
	// catalog said otherwise is no streak.
	broke bool
}

// nextStreak is the streak after a look at now that found the slot
// healthy or not (with health_check = "checks": running, and every check
// passing in the catalog, and where mariposa runs the checks itself,
// passing in its own runs too), its members' PIDs, and local: since when
// every check has passed where mariposa runs it (ScriptCheck.Local; zero
// when the slot has a check mariposa does not run, or with another
// health_check). from is when the wait began.
//
// min_healthy_time counts from when the checks passed, not from when the
// catalog showed it: a check's result reaches the catalog 0.1-0.2 s after
// mariposa has it (the agent's anti-entropy, then the node's health
// query). So the first streak of a wait starts at local, never before
// from, once the catalog shows the slot passing too; the catalog must
// then show it passing at every look until min_healthy_time is up. A
// break seen (or a restart) ends the streak, and the next one counts from
// the look that sees the slot healthy again. Without local (a check run
// by the agent, health_check = "running" or "manual") a streak counts from
// the look that saw the slot healthy. The catalog's lag forgiven is at
// most MaxCatalogLag: a catalog further behind than that is not catching
// up but slow, and the count goes by it. Whenever local is later than the
// streak's start, the checks broke where they run and passed again before
// the catalog showed it: the streak starts over at local.
// MaxCatalogLag is how long before the catalog first shows a slot passing
// min_healthy_time may have started counting: about five times the
// propagation measured under load (0.05-0.12 s at p50).
const MaxCatalogLag = 500 * time.Millisecond

func nextStreak(s healthStreak, healthy bool, pids []int, local, from, now time.Time) healthStreak {
	if !healthy {
		if !s.since.IsZero() {
			s.broke = true
		}
		s.since = time.Time{}
		return s
	}
	if !s.since.IsZero() && fmt.Sprint(pids) != fmt.Sprint(s.pids) {
		s.since, s.broke = time.Time{}, true // restarted
	}
	if s.since.IsZero() {
		s.since, s.seen, s.pids = now, now, pids
		if !s.broke && !local.IsZero() {
			s.since = earlier(later(later(local, from), now.Add(-MaxCatalogLag)), now)
		}
	}
	if local.After(s.since) {
		s.since = earlier(local, now)
	}
	return s
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// How often waitHealthy looks at the instance: often while it is not
// healthy yet (the moment it becomes so starts min_healthy_time), less
// often while it stays so, and at the very moment min_healthy_time ends.
// A look is a copy of the node's snapshots, without I/O.
const (
	healthPoll    = 20 * time.Millisecond
	healthRecheck = 100 * time.Millisecond
)

// healthWait is how long waitHealthy sleeps before its next look, given
// since (when the instance was first seen healthy, zero if it is not) and
// now: healthPoll until it is healthy, then healthRecheck, but never past
// since + minHealthy (a tick's period rounded every batch of a rollout up
// by up to 100 ms, twice: when health came and when it had lasted).
func healthWait(since, now time.Time, minHealthy time.Duration) time.Duration {
	if since.IsZero() {
		return healthPoll
	}
	left := since.Add(minHealthy).Sub(now)
	return max(0, min(left, healthRecheck))
}

// ManualHealthKey is rollout/<unit>/<version>/healthy/<k>: an operator
// says slot k's instance is healthy at version (health_check = "manual").
func ManualHealthKey(unit, version string, k int) string {
	return fmt.Sprintf("%s%s/%s/healthy/%d", RolloutPrefix, unit, version, k)
}

// watchMark follows key with a blocking query until ctx ends; the result
// says whether the key exists, as last read.
func (f *Fleet) watchMark(ctx context.Context, key string) func() bool {
	return WatchKeyExists(ctx, f.cfg.Client, key)
}

// WatchKeyExists follows key with a blocking query until ctx ends; the
// result says whether the key exists, as last read (an operator's mark
// of health_check = "manual", for both engines).
func WatchKeyExists(ctx context.Context, client *api.Client, key string) func() bool {
	var seen atomic.Bool
	go func() {
		var index uint64
		for ctx.Err() == nil {
			p, meta, err := client.KV().Get(key, (&api.QueryOptions{WaitIndex: index, WaitTime: time.Minute}).WithContext(ctx))
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			seen.Store(p != nil)
			if meta.LastIndex < index {
				index = 0
			} else {
				index = meta.LastIndex
			}
		}
	}()
	return seen.Load
}

// publish waits until slot id's instances are healthy at the version
// they run and says so in the slot's status key (a deployment's progress,
// and the health status counts).
// The record goes with it while a deployment runs (record).
func (f *Fleet) publish(ctx context.Context, id string, h *heldSlot, record bool) {
	defer func() {
		f.mu.Lock()
		h.publishing = false
		f.mu.Unlock()
	}()
	f.mu.Lock()
	u := h.unit
	f.mu.Unlock()
	if _, err := f.waitHealthy(ctx, id, h, u, h.term.Lost(), 0, time.Now()); err != nil {
		return
	}
	if err := f.publishHealthy(ctx, id, h, runHash(u), record); err != nil && ctx.Err() == nil {
		f.log.Warn("could not publish the slot's health", "slot", id, "error", err)
	}
}

// publishHealthy writes into slot id's status key that its instances run
// version hash and are healthy at it, with the record when record.
func (f *Fleet) publishHealthy(ctx context.Context, id string, h *heldSlot, hash string, record bool) error {
	h.pubMu.Lock()
	defer h.pubMu.Unlock()
	f.mu.Lock()
	if runHash(h.unit) != hash {
		f.mu.Unlock()
		return nil // moved on meanwhile: its health is no longer news
	}
	unit := h.unit.Unit.Name
	f.mu.Unlock()
	now := f.cfg.Now()
	st := HoldStatus{Index: h.term.Index, Version: hash, HealthyAt: &now}
	ops := api.TxnOps{statusOp(unit, h.k, st)}
	if record {
		ops = append(ops, AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Service: unit, Slot: id,
			Action: "healthy", To: withVersion(h.unit.Version(), hash), Reason: "healthy for min_healthy_time", TermIndex: h.term.Index}))
	}
	err := h.term.Fenced(ctx, ops)
	if err != nil {
		return err
	}
	f.mu.Lock()
	h.status = st
	f.mu.Unlock()
	return nil
}

// restamp writes into h's status key that its instances now move to
// version hash, not healthy at it yet.
func (f *Fleet) restamp(ctx context.Context, h *heldSlot, hash string) error {
	h.pubMu.Lock()
	defer h.pubMu.Unlock()
	f.mu.Lock()
	cur, unit := h.status, h.unit.Unit.Name
	f.mu.Unlock()
	if cur.Version == hash && cur.HealthyAt == nil {
		return nil
	}
	if cur.Version == "" && h.value.Version == hash {
		return nil // as claimed
	}
	st := HoldStatus{Index: h.term.Index, Version: hash}
	from := cur.Version
	if from == "" {
		from = h.value.Version
	}
	// The decision's record goes with it (website/operations.md's
	// "update", as the step machine writes it).
	now := f.cfg.Now()
	if err := h.term.Fenced(ctx, api.TxnOps{statusOp(unit, h.k, st),
		AuditOp(AuditEvent{At: now, Node: f.cfg.Node, Service: unit, Slot: slotName(unit, h.k), Action: "update",
			From: from, To: hash, Reason: "the instance moves to version " + hash, TermIndex: h.term.Index})}); err != nil {
		return err
	}
	f.mu.Lock()
	h.status = st
	f.mu.Unlock()
	return nil
}

// statusOp writes st into slot k of unit's status key (with Term.Fenced:
// only while the hold lasts).
func statusOp(unit string, k int, st HoldStatus) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: StatusKey(unit, k), Value: st.encode()}}
}

// needsPublish: h's status key does not say yet that it is healthy at the
// version it runs.
func needsPublish(h *heldSlot) bool {
	return h.status.Version != runHash(h.unit) || h.status.HealthyAt == nil
}

// slotHealthy says whether every member of u runs in slot id and is
// healthy per health_check, with their PIDs, or why not. With
// health_check = "checks", local is since when every member's checks have
// passed in mariposa's own runs, when it runs every one of them (zero
// otherwise): a member's checks must then pass there as well as in the
// catalog.
func slotHealthy(snaps []supervisor.Snapshot, id string, u UnitSpec, mode string) (ok bool, pids []int, local time.Time, why string) {
	allLocal := mode == schema.UpdateChecks
	for _, svc := range u.Services {
		var sn *supervisor.Snapshot
		for i := range snaps {
			if snaps[i].Slot == id && snaps[i].Service == svc.Name {
				sn = &snaps[i]
			}
		}
		switch {
		case sn == nil:
			return false, nil, time.Time{}, svc.Name + " not started"
		case sn.State != supervisor.StateRunning:
			return false, nil, time.Time{}, fmt.Sprintf("%s %s", svc.Name, sn.State)
		case mode == schema.UpdateChecks && !sn.ChecksPassing:
			return false, nil, time.Time{}, svc.Name + "'s checks not passing"
		case mode == schema.UpdateChecks && sn.LocalChecks && sn.LocalPassingSince.IsZero():
			return false, nil, time.Time{}, svc.Name + "'s checks not passing where mariposa runs them"
		}
		pids = append(pids, sn.PID)
		if allLocal = allLocal && sn.LocalChecks; allLocal {
			local = later(local, sn.LocalPassingSince)
		}
	}
	if !allLocal {
		local = time.Time{}
	}
	return true, pids, local, ""
}
