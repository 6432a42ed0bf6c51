package lease

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/holdrule"
)

// session is one Consul session of a lease. It is the lease's current
// session until it is retired (lost, the lease closed, or its one term
// released); a retired session takes no new term, and is released and
// destroyed once its last term was released. It is never used again.
type session struct {
	l        *Lease
	id       string
	rule     holdrule.Rule // the confirmation deadline of its terms
	invalid  chan struct{} // Consul said the session is gone
	retiredc chan struct{}
	wake     chan struct{} // a term was attached: confirm it
	renewNow chan struct{} // a key was found released: is the session gone?
	ctx      context.Context
	cancel   context.CancelFunc
	loops    sync.WaitGroup

	invalidOnce, stopOnce sync.Once

	// Guarded by l.mu.
	terms     map[*Term]struct{}
	pending   []heldKey // keys whose release failed, to retry
	finishing bool

	mu      sync.Mutex
	renewed time.Time // send time of the last successful renewal (or creation)
}

func newSession(l *Lease, id string, created time.Time) *session {
	ctx, cancel := context.WithCancel(context.Background())
	l.mu.Lock()
	rule := l.t.rule
	l.mu.Unlock()
	return &session{l: l, id: id, rule: rule, invalid: make(chan struct{}), retiredc: make(chan struct{}),
		wake: make(chan struct{}, 1), renewNow: make(chan struct{}, 1), ctx: ctx, cancel: cancel, terms: map[*Term]struct{}{}, renewed: created}
}

// start runs the renewal, the confirmation rounds and the watchdog. They run
// until the session is finished, also while its terms stop their work, so
// the locks stay held until the work has stopped.
func (s *session) start() {
	s.loops.Go(s.renew)
	s.loops.Go(s.confirmLoop)
	s.loops.Go(s.watchdog)
}

func (s *session) stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		s.loops.Wait()
	})
}

func (s *session) renewedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewed
}

func (s *session) isInvalid() bool { return isClosed(s.invalid) }
func (s *session) isRetired() bool { return isClosed(s.retiredc) }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// setInvalid records that Consul invalidated the session, and retires it.
func (s *session) setInvalid() {
	s.invalidOnce.Do(func() { close(s.invalid) })
	if s.l.retire(s, ErrSessionInvalid) {
		s.l.finishAsync(s)
	}
}

// idleLocked reports, once, that s is retired with no term left: the caller
// finishes it. l.mu is held.
func (s *session) idleLocked() bool {
	if s.isRetired() && len(s.terms) == 0 && !s.finishing {
		s.finishing = true
		return true
	}
	return false
}

// checkNow has the renewal loop renew at once: a key found released or
// taken says the session may be gone, and if it is, every hold under it
// must end and contenders must move to a new session now, not at the next
// renewal.
func (s *session) checkNow() {
	select {
	case s.renewNow <- struct{}{}:
	default:
	}
}

func (s *session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// retire makes s take no new term. With a non-nil err the session is lost,
// or must be assumed lost: every term it holds ends at once with err. It
// reports whether the caller must finish s (retired, no term left).
func (l *Lease) retire(s *session, err error) bool {
	l.mu.Lock()
	if !s.isRetired() {
		close(s.retiredc)
		if l.cur == s {
			l.cur = nil
		}
		switch {
		case err != nil && len(s.terms) > 0:
			l.log.Warn("session lost: every lock it holds ends", "session", s.id, "terms", len(s.terms), "reason", err)
		case err != nil:
			l.log.Debug("session lost", "session", s.id, "reason", err)
		}
	}
	var terms []*Term
	if err != nil {
		for t := range s.terms {
			terms = append(terms, t)
		}
	}
	finish := s.idleLocked()
	l.mu.Unlock()
	for _, t := range terms {
		t.expire(err)
	}
	return finish
}

// attached returns the terms attached to s; live ones only with live.
func (s *session) attached(live bool) []*Term {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	out := make([]*Term, 0, len(s.terms))
	for t := range s.terms {
		if !live || !t.isExpired() {
			out = append(out, t)
		}
	}
	return out
}

// confirmed returns the live terms of s that are confirmed (not
// Hold.Unconfirmed): what the confirmation rounds read and the watchdog
// guards.
func (s *session) confirmed() []*Term {
	all := s.attached(true)
	out := all[:0]
	for _, t := range all {
		if !t.unconfirmed {
			out = append(out, t)
		}
	}
	return out
}

// renew renews s every TTL/2 (sooner after an error) until s is finished or
// Consul says it is gone. It also retries the releases that failed.
func (s *session) renew() {
	l := s.l
	wait := l.t.ttl / 2
	for {
		timer := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-s.renewNow:
			timer.Stop()
		}
		rctx, cancel := context.WithTimeout(s.ctx, l.t.request)
		sent := l.now()
		entry, _, err := l.cfg.Client.Session().Renew(s.id, (&api.WriteOptions{}).WithContext(rctx))
		cancel()
		switch {
		case s.ctx.Err() != nil:
			return
		case err != nil:
			l.log.Debug("session renewal failed", "session", s.id, "error", err)
			wait = min(l.t.ttl/8, time.Second)
		case entry == nil:
			l.log.Debug("session is gone", "session", s.id)
			s.setInvalid()
			return
		default:
			s.mu.Lock()
			if sent.After(s.renewed) {
				s.renewed = sent
			}
			s.mu.Unlock()
			wait = l.t.ttl / 2
			s.retryPending()
		}
	}
}

// retryPending retries the releases of s that failed.
func (s *session) retryPending() {
	l := s.l
	l.mu.Lock()
	todo := s.pending
	s.pending = nil
	l.mu.Unlock()
	var kept []heldKey
	for _, k := range todo {
		if err := l.releaseKey(k, s.id); err != nil {
			kept = append(kept, k)
			continue
		}
		l.mu.Lock()
		delete(l.keys, k.key)
		l.mu.Unlock()
	}
	l.mu.Lock()
	s.pending = append(s.pending, kept...)
	l.mu.Unlock()
}

// confirmLoop keeps the confirmations of every held key recent: one
// consistent read for all of them every lockDelay/5.
func (s *session) confirmLoop() {
	l := s.l
	for s.ctx.Err() == nil {
		terms := s.confirmed()
		if len(terms) == 0 {
			select {
			case <-s.wake:
			case <-s.ctx.Done():
			}
			continue
		}
		sent := l.now()
		ok := s.round(s.ctx, terms)
		wait := l.t.round / 4 // after a failure: the watchdog ends the terms if this lasts
		if ok {
			wait = min(max(l.t.round-l.now().Sub(sent), 0), l.t.round)
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(wait):
		}
	}
}

// round confirms terms with one consistent read of their keys (one per 128
// keys). It reports whether every read got an answer.
func (s *session) round(ctx context.Context, terms []*Term) bool {
	l := s.l
	l.rounds.Add(1)
	byKey := map[string][]*Term{}
	for _, t := range terms {
		byKey[t.Key] = append(byKey[t.Key], t)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), maxTxnOps)]
		keys = keys[len(chunk):]
		failed := func(at time.Time, kind holdrule.Kind) {
			for _, k := range chunk {
				for _, t := range byKey[k] {
					t.fail(at, kind)
				}
			}
		}
		type answer struct {
			sent     time.Time
			pairs    map[string]*api.KVPair
			err      error
			timedOut bool
		}
		// Room for every read launched: a late one never blocks.
		answered := make(chan answer, 2)
		launch := func() {
			rctx, cancel := context.WithTimeout(ctx, l.t.roundTimeout)
			sent := l.now()
			l.reads.Add(1)
			go func() {
				defer cancel()
				pairs, err := l.read(rctx, chunk)
				answered <- answer{sent, pairs, err, rctx.Err() != nil}
			}()
		}
		// During an election a server holds a consistent read until a
		// leader is elected (Consul's rpc_hold_timeout, 7s), and before
		// that, while it still believes in the dead leader, its pooled
		// connection's EOF is retried the same way (and the client agent
		// retries with a jitter of up to rpc_hold_timeout/16): a read still
		// unanswered after probeAfter is probed, every probeAfter, with a
		// stale read and a Status.Leader, which the server answers at once
		// from its own state (serverProbe). A NoLeader probe is recorded at once, at its own
		// send time, before the strict deadline can pass: it is evidence
		// gathered after this read was sent, so it outlives the read's
		// own confirmation if the read, held until a new leader was
		// elected, succeeds late. A probe that finds a leader in contact
		// instead sends a second read (once): the first may be waiting in
		// a retry on a server that went away, and a fresh one confirms
		// through a live server.
		launch()
		pending, hedged := 1, false
		probed := holdrule.Unproven
		slow := time.NewTicker(l.t.probeAfter)
		var ok *answer
		for pending > 0 && ok == nil {
			select {
			case a := <-answered:
				pending--
				if a.err == nil {
					ok = &a
					break
				}
				if ctx.Err() != nil {
					slow.Stop()
					return false
				}
				kind := noLeaderAnswer(a.err)
				if kind != holdrule.NoLeader && a.timedOut {
					// No answer in time: what the server said meanwhile,
					// or says now.
					kind = probed
					if kind != holdrule.NoLeader {
						kind = l.probeWithin(ctx, chunk[0], l.t.roundTimeout/2)
					}
				}
				l.log.Debug("cannot confirm the locks", "session", s.id, "error", a.err, "proves", kind)
				failed(a.sent, kind)
			case <-slow.C:
				if probed == holdrule.NoLeader {
					continue
				}
				at := l.now()
				probed = l.probeNow(ctx, chunk[0])
				l.log.Trace("confirmation read unanswered; probed its server", "session", s.id, "proves", probed)
				if probed == holdrule.NoLeader {
					failed(at, holdrule.NoLeader)
				} else if !hedged && ctx.Err() == nil {
					hedged = true
					pending++
					launch()
				}
			}
		}
		slow.Stop()
		if ok == nil {
			return false
		}
		for _, k := range chunk {
			s.apply(ok.sent, byKey[k], ok.pairs)
		}
	}
	return true
}

// apply records what a read sent at sent says of terms' key.
func (s *session) apply(sent time.Time, terms []*Term, pairs map[string]*api.KVPair) {
	for _, t := range terms {
		p, ok := pairs[t.Key]
		switch {
		case !ok:
			// Not in the answer (an ACL filtered it?): no confirmation.
		case p.Session == s.id:
			t.confirm(sent)
		case p.ModifyIndex == 0:
			t.expire(fmt.Errorf("%w (the key was deleted)", ErrLockLost))
		case p.Session == "":
			t.expire(fmt.Errorf("%w (released: the session was invalidated, or the key released by hand)", ErrLockLost))
			s.checkNow()
		default:
			t.expire(fmt.Errorf("%w (now held by session %s)", ErrLockLost, p.Session))
			s.checkNow()
		}
	}
}

// noLeaderAnswer classifies a failed confirmation read: NoLeader when the
// local agent answered (an HTTP error status, which the api client reports
// as "Failed request: <body>" for a transaction and "Unexpected response
// code" otherwise) relaying a failure to reach the Raft leader: "No cluster
// leader", or the RPC connection to the leader (or to a server) refused,
// reset or closed. Measured on a 3-server cluster whose leader was killed:
// "rpc error making call: rpc error getting client: failed to get conn:
// dial tcp ...: connect: connection refused" until the followers noticed,
// then held reads. "shutdown waiting for leader" is a server that won an
// election but was stopped before it was ready for consistent reads
// (consul/agent/consul/rpc.go, consistentReadWithContext: past
// VerifyLeader, waiting for the new term's barrier): a leader that had not
// yet established itself, so had armed no session timer and reconciled no
// member (seen when the leading server was restarted in a rolling
// upgrade). Anything else proves nothing (holdrule.Unproven): no answer,
// the local agent itself unreachable (its connection error has no such
// prefix), an ACL refusal.
func noLeaderAnswer(err error) holdrule.Kind {
	msg := err.Error()
	if !strings.HasPrefix(msg, "Failed request: ") && !strings.HasPrefix(msg, "Unexpected response code: 5") {
		return holdrule.Unproven
	}
	for _, m := range []string{"No cluster leader", "rpc error getting client", "failed to get conn",
		"connection refused", "connection reset", ": EOF", "leadership lost", "node is not the leader",
		"shutdown waiting for leader"} {
		if strings.Contains(msg, m) {
			return holdrule.NoLeader
		}
	}
	return holdrule.Unproven
}

// probeNow runs the server probe with a short timeout.
func (l *Lease) probeNow(ctx context.Context, key string) holdrule.Kind {
	return l.probeWithin(ctx, key, max(l.t.round, 100*time.Millisecond))
}

// probeWithin runs the server probe with timeout d. The last probe of a
// read that got no answer gets longer (half the read's own timeout): its
// answer decides between the extended and the strict deadline, and on a
// busy node a stale read can take longer than a confirmation period.
func (l *Lease) probeWithin(ctx context.Context, key string, d time.Duration) holdrule.Kind {
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return l.probe(pctx, key)
}

// serverProbe asks the server the local agent talks to, in two ways at
// once, whether it is without a leader; NoLeader as soon as one says so.
//
//   - staleProbe: a stale read, answered by the server from its own state
//     with X-Consul-KnownLeader and X-Consul-LastContact: it shows a
//     follower that has not heard from its leader for too long, before the
//     follower's heartbeat timeout makes it drop the leader.
//   - leaderProbe: /v1/status/leader, which a server answers at once from
//     its own Raft state (Status.Leader is never forwarded): "" when it
//     knows no leader. A server started again (a rolling upgrade) has not
//     heard from any leader since it started, and forwards even a stale
//     read to the leader, so it holds the stale probe like a consistent
//     read until a leader is elected (Consul's rpc_hold_timeout, 7s); its
//     Status.Leader answers "" at once.
//
// Either answer is an answer of the local agent relaying a server, as a
// "No cluster leader" is (see holdrule). No answer proves nothing.
func (l *Lease) serverProbe(ctx context.Context, key string) holdrule.Kind {
	return ServerProbe(ctx, l.cfg.Client, key, l.t.probeAfter)
}

// staleProbe is the stale half of serverProbe (staleProbe).
func (l *Lease) staleProbe(ctx context.Context, key string) holdrule.Kind {
	return staleProbe(ctx, l.cfg.Client, key, l.t.probeAfter)
}

// leaderKind: an empty answer to /v1/status/leader is a server's own "no
// leader" (NoLeader); an error is what noLeaderAnswer says; a leader's
// address proves nothing (a follower keeps a dead leader's address until
// its heartbeat timeout).
func leaderKind(addr string, err error) holdrule.Kind {
	if err != nil {
		return noLeaderAnswer(err)
	}
	if addr == "" {
		return holdrule.NoLeader
	}
	return holdrule.Unproven
}

// staleKind: a stale answer proves NoLeader when the answering server knows
// no leader, or has not heard from its leader for longer than silent
// (lock_delay/10): a follower of a live leader hears from it every raft
// heartbeat interval, HeartbeatTimeout/10 (100ms at raft_multiplier 1).
// Measured on a killed leader: KnownLeader stays true, LastContact grows,
// until the followers' heartbeat timeout, then KnownLeader is false.
func staleKind(meta *api.QueryMeta, silent time.Duration) holdrule.Kind {
	if meta != nil && (!meta.KnownLeader || meta.LastContact > silent) {
		return holdrule.NoLeader
	}
	return holdrule.Unproven
}

// txnRead reads keys in one consistent read-only transaction. get-or-empty
// answers for a missing key too (with a zero ModifyIndex), where get would
// fail the whole transaction.
func (l *Lease) txnRead(ctx context.Context, keys []string) (map[string]*api.KVPair, error) {
	ops := make(api.TxnOps, len(keys))
	for i, k := range keys {
		ops[i] = &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGetOrEmpty, Key: k}}
	}
	ok, resp, _, err := l.cfg.Client.Txn().Txn(ops, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if !ok {
		var msgs []string
		for _, e := range resp.Errors {
			msgs = append(msgs, e.What)
		}
		return nil, fmt.Errorf("read transaction failed: %s", strings.Join(msgs, "; "))
	}
	out := make(map[string]*api.KVPair, len(keys))
	for _, r := range resp.Results {
		if r != nil && r.KV != nil {
			out[r.KV.Key] = r.KV
		}
	}
	return out, nil
}

// watchdog ends every term of s when one's confirmation or the session's
// renewal gets too old, or when the process did not run for longer than
// lockDelay/2: the keys are read together, so what is true of one key's
// confirmation is true of all, and the session is retired (never used
// again).
func (s *session) watchdog() {
	l := s.l
	tk := time.NewTicker(l.t.tick)
	defer tk.Stop()
	prev := l.now()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tk.C:
		}
		now := l.now()
		gap := now.Sub(prev)
		prev = now
		if s.inspect(now, gap) {
			l.finishAsync(s)
		}
	}
}

// inspect is one watchdog check at now, gap after the previous one. It
// reports whether the caller must finish s.
func (s *session) inspect(now time.Time, gap time.Duration) bool {
	l := s.l
	terms := s.confirmed()
	if len(terms) == 0 {
		return false
	}
	var lost error
	if gap > l.t.loseAfter {
		lost = fmt.Errorf("%w (%v between two checks %v apart)", ErrClockGap,
			gap.Round(time.Millisecond), l.t.tick)
	} else {
		renewed := s.renewedAt()
		for _, t := range terms {
			if err := t.check(now, renewed); err != nil {
				lost = err
				break
			}
		}
	}
	return lost != nil && l.retire(s, lost)
}
