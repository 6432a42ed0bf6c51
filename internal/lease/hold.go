package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// Hold says which key to lock under a lease.
type Hold struct {
	// Key is the KV key to lock, e.g. "mariposa/leader/web".
	Key string
	// Value is written to the key when acquired, so others can see who
	// holds it.
	Value []byte
	// Log receives the term's events; default the lease's, with the key.
	Log hclog.Logger
	// Unconfirmed holds guard nothing that must stop within lockDelay/2 of
	// a lost session (the node lock): they cost no confirmation reads and
	// have no watchdog, and end when the session is found lost (at its
	// next renewal, within TTL/2) or another confirmed hold's read sees
	// the session gone. Leaders and exclusive slots are confirmed.
	Unconfirmed bool
}

// key reservations in Lease.keys.
const (
	keyHeld    = "held"    // contended for, or held by a term
	keyPending = "pending" // its release failed; retried
)

// errHeld is acquire's answer, in failIfHeld mode (the node lock's), when
// another session holds the key.
type errHeld struct{ pair *api.KVPair }

func (e *errHeld) Error() string {
	return fmt.Sprintf("%s is held by session %s", e.pair.Key, e.pair.Session)
}

// Acquire waits until the lease's current session (created first if there
// is none) holds h.Key, and returns the term. It waits with a blocking
// query while another session holds the key. The term is confirmed with
// every other term of the session, in one read every lockDelay/5, until
// Release. One key can be held at most once under a lease.
//
// Acquire fails when ctx ends, when Consul cannot be reached, when the
// session is lost while it waits (ErrRetired), or when the acquisition was
// confirmed too late to trust (ErrStale): contend again.
func (l *Lease) Acquire(ctx context.Context, h Hold) (*Term, error) {
	return l.acquire(ctx, h, false)
}

func (l *Lease) acquire(ctx context.Context, h Hold, failIfHeld bool) (*Term, error) {
	if h.Key == "" {
		return nil, errors.New("lease: a hold needs a key")
	}
	if err := l.reserve(h.Key); err != nil {
		return nil, err
	}
	attached := false
	defer func() {
		if !attached {
			l.unreserve(h.Key)
		}
	}()
	s, err := l.session(ctx)
	if err != nil {
		return nil, err
	}
	log := h.Log
	if log == nil {
		log = l.log.With("key", h.Key)
	}

	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.retiredc:
			ccancel()
		case <-cctx.Done():
		}
	}()
	sent, pair, err := s.contend(cctx, h, failIfHeld, log)
	ccancel()
	if err != nil {
		if s.isRetired() && ctx.Err() == nil {
			// An acquire whose answer was lost may have succeeded.
			l.bestEffortRelease(s, h)
			if s.isInvalid() {
				return nil, fmt.Errorf("%w: Consul invalidated it", ErrRetired)
			}
			return nil, ErrRetired
		}
		return nil, err
	}

	t := newTerm(l, s, h.Key, pair.Value, log, sent)
	t.unconfirmed = h.Unconfirmed
	t.Index, t.LockIndex = pair.ModifyIndex, pair.LockIndex
	// The acquisition itself may be stale already (a slow answer, a freeze).
	if t.stale(l.now()) {
		l.bestEffortRelease(s, h)
		return nil, ErrStale
	}
	l.mu.Lock()
	if s.isRetired() {
		l.mu.Unlock()
		l.bestEffortRelease(s, h)
		return nil, ErrRetired
	}
	s.terms[t] = struct{}{}
	l.mu.Unlock()
	attached = true
	s.poke()
	return t, nil
}

// reserve marks key as contended for under the lease. A key whose release
// failed earlier is released again first.
func (l *Lease) reserve(key string) error {
	for try := 0; ; try++ {
		l.mu.Lock()
		state := l.keys[key]
		if state == "" {
			l.keys[key] = keyHeld
			l.mu.Unlock()
			return nil
		}
		l.mu.Unlock()
		if state == keyHeld {
			return fmt.Errorf("lease: %s is already held or contended for under this lease", key)
		}
		if try > 0 {
			return fmt.Errorf("lease: an earlier release of %s failed; retrying", key)
		}
		l.retryOrphans()
		for _, s := range l.liveSessions() {
			s.retryPending()
		}
		l.forgetUntracked(key)
	}
}

func (l *Lease) unreserve(key string) {
	l.mu.Lock()
	if l.keys[key] == keyHeld {
		delete(l.keys, key)
	}
	l.mu.Unlock()
}

func (l *Lease) liveSessions() []*session {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*session, 0, len(l.live))
	for s := range l.live {
		out = append(out, s)
	}
	return out
}

// bestEffortRelease releases h.Key if s holds it, when no term was made.
func (l *Lease) bestEffortRelease(s *session, h Hold) {
	if s.isInvalid() {
		return
	}
	if err := l.releaseKey(heldKey{key: h.Key, value: h.Value}, s.id); err != nil {
		l.log.Debug("cannot release a key acquired without a term", "key", h.Key, "error", err)
	}
}

func (l *Lease) releaseKey(k heldKey, session string) error {
	ctx, cancel := context.WithTimeout(context.Background(), l.t.cleanup)
	defer cancel()
	wo := (&api.WriteOptions{}).WithContext(ctx)
	if len(k.ops) == 0 {
		_, _, err := l.cfg.Client.KV().Release(&api.KVPair{Key: k.key, Value: k.value, Session: session}, wo)
		if sessionGone(err) {
			return nil
		}
		return err
	}
	ops := append(api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVUnlock, Key: k.key, Value: k.value, Session: session}}}, k.ops...)
	ok, resp, _, err := l.cfg.Client.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		if sessionGone(err) {
			return nil
		}
		return err
	}
	if !ok {
		// Rolled back because the session no longer holds the key (it was
		// invalidated, and Consul released the lock then): there is
		// nothing to release, and the record would describe a release
		// that did not happen.
		if err := txnError(resp); !sessionGone(err) && !strings.Contains(err.Error(), "lock isn't held") {
			return err
		}
	}
	return nil
}

// txnError describes a transaction Consul rolled back.
func txnError(resp *api.TxnResponse) error {
	var msgs []string
	if resp != nil {
		for _, e := range resp.Errors {
			msgs = append(msgs, fmt.Sprintf("op %d: %s", e.OpIndex, e.What))
		}
	}
	return fmt.Errorf("transaction rolled back: %s", strings.Join(msgs, "; "))
}

// detach releases t's key and takes t off its session; see Term.Release.
func (l *Lease) detach(t *Term) error {
	s := t.s
	t.released.Store(true)
	t.mu.Lock()
	value := t.value
	t.mu.Unlock()
	var err error
	if !s.isInvalid() {
		err = l.releaseKey(heldKey{key: t.Key, value: value, ops: t.releaseOps}, s.id)
	}
	l.mu.Lock()
	delete(s.terms, t)
	if err != nil {
		// The key stays reserved until a retry releases it: with the
		// session's pending releases while it lives, else (it was retired
		// and finished meanwhile) as an orphan of its own, which reserve
		// and Close retry; a finished session's pending list is never
		// looked at again, and the key would stay reserved for good.
		l.keys[t.Key] = keyPending
		hk := heldKey{key: t.Key, value: value, ops: t.releaseOps}
		if _, live := l.live[s]; live {
			s.pending = append(s.pending, hk)
		} else {
			l.orphans = append(l.orphans, orphan{id: s.id, keys: []heldKey{hk}})
		}
	} else {
		delete(l.keys, t.Key)
	}
	l.mu.Unlock()
	if err != nil {
		t.log.Warn("cannot release the lock; will retry", "session", s.id, "error", err)
	}
	var finish bool
	if l.cfg.OneTermPerSession {
		finish = l.retire(s, nil)
	} else {
		l.mu.Lock()
		finish = s.idleLocked()
		l.mu.Unlock()
	}
	if finish {
		l.finish(s)
	}
	return err
}

// contend waits for the key to be free and acquires it with s. It returns
// the key as s holds it, and when the request that showed it held was sent
// (the term's first confirmation): the acquiring transaction's own answer,
// or, when that answer was lost or refused, a consistent read's.
func (s *session) contend(ctx context.Context, h Hold, failIfHeld bool, log hclog.Logger) (time.Time, *api.KVPair, error) {
	l := s.l
	kv := l.cfg.Client.KV()
	var index uint64
	// refused: an acquire was refused and no other holder seen since.
	refused := false
	for {
		if err := ctx.Err(); err != nil {
			return time.Time{}, nil, err
		}
		// Look before acquiring: an acquire whose answer was lost may have
		// succeeded, and a held key is waited on with a blocking query.
		wait := l.t.standbyWait
		if index == 0 {
			wait = 0
		}
		rctx, cancel := context.WithTimeout(ctx, wait+wait/16+l.t.request)
		sent := l.now()
		pair, meta, err := kv.Get(h.Key, (&api.QueryOptions{
			WaitIndex: index, WaitTime: wait, RequireConsistent: true,
		}).WithContext(rctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return time.Time{}, nil, ctx.Err()
			}
			return time.Time{}, nil, fmt.Errorf("read %s: %w", h.Key, err)
		}
		if meta.LastIndex < index {
			index = 0 // the index went backwards (state reset): start over
		} else {
			index = meta.LastIndex
		}
		switch {
		case pair != nil && pair.Session == s.id:
			return sent, pair, nil
		case pair != nil && pair.Session != "" && failIfHeld:
			return time.Time{}, nil, &errHeld{pair: pair}
		case pair != nil && pair.Session != "":
			refused = false
			continue // held by another session: block until it changes
		}
		rctx, cancel = context.WithTimeout(ctx, l.t.request)
		var ok bool
		var held *api.KVPair
		sent = l.now()
		ok, held, err = s.lock(rctx, h)
		cancel()
		if ok && err == nil && held != nil && held.Session == s.id {
			// The transaction's answer is the held key itself, with the
			// index that fences this term: no read needed (a round trip
			// less on every takeover). Its send time bounds the term.
			return sent, held, nil
		}
		index = 0 // read again at once to see what happened
		switch {
		case err != nil && strings.Contains(err.Error(), "invalid session"):
			s.setInvalid()
			return time.Time{}, nil, err
		case err != nil:
			if ctx.Err() != nil {
				return time.Time{}, nil, ctx.Err()
			}
			return time.Time{}, nil, fmt.Errorf("acquire %s: %w", h.Key, err)
		case !ok && !refused:
			// Free but refused: another session was faster, or a lock delay
			// after an invalidation; Consul does not say which. Read again
			// at once: a faster session's hold is then watched with a
			// blocking query, and a quick release of it is not missed.
			log.Trace("acquire refused, lock delay or race; reading again")
			refused = true
		case !ok:
			// Refused again with no holder seen: a lock delay. Consul does
			// not say how long it lasts.
			log.Trace("acquire refused again, lock delay")
			if !sleep(ctx, l.t.retry) {
				return time.Time{}, nil, ctx.Err()
			}
		}
	}
}

// lock acquires h.Key with h.Value in a transaction of one lock: unlike a
// plain acquire, its answer says the key's new indexes. It returns the key
// as held (its value is the one written: a lock's answer leaves it out).
// false: refused (a lock delay, or another session first).
func (s *session) lock(ctx context.Context, h Hold) (bool, *api.KVPair, error) {
	key, value := h.Key, h.Value
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVLock, Key: key, Value: value, Session: s.id}}}
	ok, resp, _, err := s.l.cfg.Client.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return false, nil, err
	}
	if !ok {
		for _, e := range resp.Errors {
			if strings.Contains(e.What, "invalid session") {
				return false, nil, fmt.Errorf("acquire %s: invalid session: %s", key, e.What)
			}
		}
		return false, nil, nil
	}
	var held *api.KVPair
	if len(resp.Results) > 0 && resp.Results[0].KV != nil && resp.Results[0].KV.Key == key {
		kvp := *resp.Results[0].KV
		kvp.Value = value
		held = &kvp
	}
	return true, held, nil
}

// forgetUntracked clears key's pending mark when no retry knows of it any
// more (no live session's pending list, no orphan): nothing would ever
// release it, and the key could never be held again under this lease.
func (l *Lease) forgetUntracked(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys[key] != keyPending {
		return
	}
	for s := range l.live {
		for _, k := range s.pending {
			if k.key == key {
				return
			}
		}
	}
	for _, o := range l.orphans {
		for _, k := range o.keys {
			if k.key == key {
				return
			}
		}
	}
	l.log.Debug("no release of the key is pending any more; taking it again", "key", key)
	delete(l.keys, key)
}
