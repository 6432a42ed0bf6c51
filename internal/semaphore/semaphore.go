// Package semaphore is a Consul semaphore whose release wakes one waiter:
// the on-KV format of api.Semaphore (a contender key per session under the
// prefix, and the .lock key with the limit and the holders, changed only
// by check-and-set), with the waiters in a queue.
//
// # Why
//
// api.Semaphore's waiters all block on the whole prefix. Every change under
// it (a release, an arrival, a holder's death) wakes every waiter, each
// reads the prefix, and every waiter that sees a free token CASes .lock:
// one wins, the others fail (each failed CAS is a Raft entry) and read
// again. With N waiters a release costs about 2N reads and N-1 failed
// CASes. A rolling deploy of 30 instances spent a quarter of its Raft
// entries on those.
//
// # The queue
//
// A session holds a token when it is in .lock's holders and has a live
// contender key (held by a session) that is not waiting: flags FlagHolding,
// or an older node's (api.SemaphoreFlagValue). The waiters are the other
// live contender keys, ordered by CreateIndex (then key): the order in
// which they came. Decide computes, from one read of the prefix, what one
// contender does:
//
//   - a waiter at position i (0 first) tries, with one CAS of .lock, only
//     when more than i tokens are free (limit minus the holders). When one
//     token comes back, only the first waiter tries.
//   - the first waiter blocks on the whole prefix (a release, a holder's
//     death, an arrival wake it); every other waiter blocks on its
//     predecessor's contender key only, with the ModifyIndex it read.
//   - a waiter becomes a holder with one transaction: the CAS of .lock
//     (its holders pruned, and the session added) and its contender key
//     locked again with flags FlagHolding. That wakes its successor, the
//     new first waiter, which then blocks on the prefix. A waiter that
//     gives up deletes its key: that wakes its successor too.
//   - a holder gives its token back by deleting its contender key, one
//     write that no other write can make fail, and .lock is left as it is:
//     the session no longer counts, and the next acquisition's CAS prunes
//     it. (api.Semaphore CASes .lock on release too, so releases of a
//     batch that became healthy together failed each other's CASes.)
//
// So a release wakes the first waiter (one read, one transaction) and,
// when it took the token, the second (one read): O(1), whatever the number
// of waiters. A token costs three writes: the contender key, the
// acquisition, the release. A failed CAS is left only when two waiters try
// at once (several tokens free, and both awake) or a token goes away
// unseen.
//
// # Safety
//
// Never more than limit holders. A key becomes FlagHolding only in the
// transaction of a CAS of .lock that keeps the session among the holders,
// and that CAS was computed from a read that saw fewer than limit holders.
// Between that read and the CAS the holders can only shrink (a key
// deleted or invalidated): a new holder needs a CAS of .lock, which would
// make ours fail. A session whose entry in .lock outlived its release
// does not come back to life by contending again: its new key is
// FlagWaiting, so it is a waiter until its own CAS.
//
// A dead session holds nothing: the acquisition's transaction locks the
// contender key with the session, so a session Consul invalidated can not
// become a holder. A holder's session ending (its node died, its TTL ran
// out) releases or deletes its contender key, and every reader prunes it
// from the holders: the token comes back by session invalidation alone.
// The holder learns it from its own contender key (Acquire's lost
// channel), which it watches with a blocking query. It does not watch
// .lock, as api.Semaphore's holders do (every acquisition would wake every
// holder): a session taken out of .lock by hand, or a .lock deleted by
// hand, is noticed by nobody until it releases.
//
// A waiter that stops acting without deleting its key (Consul unreachable
// at the moment it gave up, and a session that lives on; or an older
// node's key left behind) would hold up the waiters behind it: a waiter
// takes one ahead of it whose key did not change for StaleAfter while
// tokens were free for gone, and tries anyway. That costs at worst a
// failed CAS, never a token too many.
//
// # Older nodes
//
// The keys are api.Semaphore's: .lock (flags SemaphoreFlagValue, JSON
// Limit and Holders) and contender keys held by their session; only the
// contender's flags differ (FlagWaiting, FlagHolding; api.Semaphore does
// not read them) and, with Options.Name, its name (<session>/<slot>: a
// session then holds a token per name). An older node (api.Semaphore, or
// this package before Name) counts a session once; so while a session
// holds several tokens .lock's Limit is -limit (Decide's Several), which
// an older node takes for another limit: it does not acquire, and tries
// again later. The new nodes count its holders: never more than limit
// tokens in a mixed fleet. An older node still wakes on every change and
// tries whenever it sees a free token (it may take a token before new
// waiters that came first); a new waiter behind an older one blocks on
// the prefix, as older nodes do, since an older node does not mark its
// key when it acquires.
package semaphore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// The flags of a contender key of this package (api.Semaphore's have
// api.SemaphoreFlagValue): waiting, and holding a token.
const (
	FlagWaiting uint64 = api.SemaphoreFlagValue + 1
	FlagHolding uint64 = api.SemaphoreFlagValue + 2
)

// LockKey is the name of the key with the limit and the holders.
const LockKey = api.DefaultSemaphoreKey

// ErrConflict: the prefix's .lock is not a semaphore's, or says another limit.
var ErrConflict = errors.New("semaphore: the prefix's .lock key does not match")

// Lock is what .lock holds (api.Semaphore's format, which ignores By).
//
// By names the acquisition that wrote it (its contender key and the index
// it read .lock at), so that no two acquisitions write the same value:
// Consul leaves a key's ModifyIndex alone when a write changes nothing
// (same value, flags and session), so a CAS whose value equals the one
// there "succeeds" without moving the index, and a second CAS from the
// same read succeeds too: two tokens from one free one. (The holders of
// two acquisitions can be the same set: a session listed by a released
// token takes one again.)
type Lock struct {
	Limit   int
	Holders map[string]bool
	By      string `json:",omitempty"`
}

// Decision is what one contender does after a read of the prefix.
type Decision struct {
	Live     bool   // its contender key exists and is held by its session
	Held     bool   // it is among .lock's live holders
	Try      bool   // a token is free for it: CAS .lock now
	Position int    // waiters ahead of it (stale ones not counted)
	Free     int    // tokens not held by a live holder
	Watch    string // when waiting, the key to block on; "" = the prefix
	WatchIdx uint64 // that key's ModifyIndex as read
	Lock     Lock   // .lock as read, dead holders pruned
	Several  bool   // once it holds, a session holds several tokens: .lock's Limit is written -limit
	Negative bool   // .lock's Limit reads -limit
	Any      bool   // a session holds several tokens, as read
	LockIdx  uint64 // .lock's ModifyIndex (0: no .lock yet)
	Self     *api.KVPair
}

// Decide says what the contender named name under prefix (its key is
// prefix/name, held by session) does, given the pairs under prefix (one
// read), the limit it wants, and the waiters to skip as gone (stale: key
// -> ModifyIndex at which they are skipped).
//
// A token is a live contender key that is not waiting and whose session
// .lock lists: a session holds as many tokens as it has such keys (one per
// key name, e.g. <session>/<slot>), and .lock lists each holding session
// once, as api.Semaphore does. An older node (api.Semaphore, or this
// package before it named keys per contender) counts a session once: so
// the CAS that gives a session a second token writes .lock's Limit as
// -limit (Several), which older nodes take for another limit and do not
// acquire under (they try again later); the CAS of an acquisition after
// which no session holds several writes limit again (releases do not
// write .lock, except one that leaves no session with several, which
// writes limit back: restoreLimit). Every acquisition CASes .lock, so an older node's CAS computed from a read before the
// change fails.
func Decide(pairs api.KVPairs, prefix, name, session string, limit int, stale map[string]uint64) (Decision, error) {
	lockKey := path.Join(prefix, LockKey)
	selfKey := path.Join(prefix, name)
	var d Decision
	d.Lock = Lock{Limit: limit, Holders: map[string]bool{}}
	holding := map[string]bool{} // sessions with a live contender key not waiting
	var conts []*api.KVPair
	for _, p := range pairs {
		if p.Key == lockKey {
			if p.Flags != api.SemaphoreFlagValue {
				return d, ErrConflict
			}
			d.LockIdx = p.ModifyIndex
			if len(p.Value) > 0 {
				var l Lock
				if err := json.Unmarshal(p.Value, &l); err != nil {
					return d, fmt.Errorf("semaphore: .lock: %v", err)
				}
				d.Negative = l.Limit == -limit && limit > 0
				if l.Limit != limit && !d.Negative {
					return d, fmt.Errorf("%w: limit %d, want %d", ErrConflict, l.Limit, limit)
				}
				if l.Holders != nil {
					d.Lock.Holders = l.Holders
				}
			}
			continue
		}
		if p.Session != "" {
			if p.Flags != FlagWaiting {
				holding[p.Session] = true
			}
			conts = append(conts, p)
		}
		if p.Key == selfKey {
			d.Self = p
			d.Live = p.Session == session
		}
	}
	for h := range d.Lock.Holders {
		if !holding[h] {
			delete(d.Lock.Holders, h)
		}
	}
	token := func(c *api.KVPair) bool { return c.Flags != FlagWaiting && d.Lock.Holders[c.Session] }
	tokens := 0
	perSession := map[string]int{}
	for _, c := range conts {
		if token(c) {
			tokens++
			perSession[c.Session]++
		}
	}
	d.Free = limit - tokens
	for _, n := range perSession {
		d.Any = d.Any || n > 1
	}
	d.Several = d.Any || perSession[session] > 0
	if !d.Live {
		return d, nil
	}
	if d.Held = token(d.Self); d.Held {
		return d, nil
	}
	sort.Slice(conts, func(i, j int) bool {
		if conts[i].CreateIndex != conts[j].CreateIndex {
			return conts[i].CreateIndex < conts[j].CreateIndex
		}
		return conts[i].Key < conts[j].Key
	})
	var prev *api.KVPair
	for _, c := range conts {
		if c == d.Self {
			break
		}
		if token(c) {
			continue
		}
		if idx, ok := stale[c.Key]; ok && idx == c.ModifyIndex {
			continue
		}
		d.Position++
		prev = c
	}
	d.Try = d.Position < d.Free
	if !d.Try && prev != nil && prev.Flags == FlagWaiting {
		// A waiter of this package ahead: it marks its key when it
		// takes a token, and deletes it when it gives up.
		d.Watch, d.WatchIdx = prev.Key, prev.ModifyIndex
	}
	return d, nil
}

// Options configure a Semaphore.
type Options struct {
	Prefix  string // the semaphore's keys are under it
	Limit   int    // at most this many holders
	Session string // the contender's session: a token dies with it
	// Name is the contender key's name under Prefix (default: Session,
	// api.Semaphore's). Contenders of one session with distinct names,
	// such as <session>/<slot>, each hold a token of their own.
	Name  string
	Value []byte // the contender key's value, for people reading the KV store

	// WaitTime bounds each blocking query (default 1 minute).
	WaitTime time.Duration
	// StaleAfter: a waiter ahead whose key did not change for this long
	// while tokens were free is taken for gone (default 10s).
	StaleAfter time.Duration
}

// Semaphore is one contender; Acquire, then Release.
type Semaphore struct {
	c    *api.Client
	o    Options
	mu   sync.Mutex
	held bool
	done chan struct{} // closed by Release: ends the monitor
}

// New returns a contender for o.Prefix with o.Session.
func New(c *api.Client, o Options) (*Semaphore, error) {
	if o.Prefix == "" || o.Session == "" || o.Limit < 1 {
		return nil, fmt.Errorf("semaphore: a prefix, a session and a limit >= 1 are needed")
	}
	if o.Name == "" {
		o.Name = o.Session
	}
	if n := path.Clean(o.Name); n != o.Name || n == LockKey || strings.HasPrefix(n, "../") || path.IsAbs(n) {
		return nil, fmt.Errorf("semaphore: contender name %q: not a plain key name under the prefix", o.Name)
	}
	if o.WaitTime <= 0 {
		o.WaitTime = time.Minute
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 10 * time.Second
	}
	return &Semaphore{c: c, o: o}, nil
}

func (s *Semaphore) key() string { return path.Join(s.o.Prefix, s.o.Name) }

// Acquire waits for a token until stop closes. It returns a channel that
// closes when the token is lost (the contender key no longer held by the
// session) or released; nil, nil when stop closed first. When it returns
// without a token, its contender key is deleted.
func (s *Semaphore) Acquire(stop <-chan struct{}) (<-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		return nil, api.ErrSemaphoreHeld
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	kv := s.c.KV()
	ok, _, err := kv.Acquire(&api.KVPair{Key: s.key(), Value: s.o.Value, Flags: FlagWaiting, Session: s.o.Session}, nil)
	if err != nil || !ok {
		return nil, fmt.Errorf("semaphore: no contender key: %v", err)
	}
	got := false
	defer func() {
		if !got {
			s.giveUp()
		}
	}()
	stale := map[string]uint64{}
	seen := map[string]time.Time{} // waiter ahead -> when first seen unchanged with tokens free
	var listIdx uint64
	for {
		if ctx.Err() != nil {
			return nil, nil
		}
		pairs, meta, err := kv.List(s.o.Prefix, (&api.QueryOptions{WaitIndex: listIdx, WaitTime: min(s.o.WaitTime, s.o.StaleAfter)}).WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, fmt.Errorf("semaphore: reading %s: %v", s.o.Prefix, err)
		}
		d, err := Decide(pairs, s.o.Prefix, s.o.Name, s.o.Session, s.o.Limit, stale)
		if err != nil {
			return nil, err
		}
		switch {
		case !d.Live:
			return nil, fmt.Errorf("semaphore: the contender key is not held by the session any more")
		case d.Held:
			got = true
			return s.hold(d.Self.ModifyIndex), nil
		case d.Try:
			if s.tryAcquire(ctx, d) {
				got = true
				return s.hold(0), nil
			}
			listIdx = 0 // lost a race: read again at once
			continue
		}
		s.markStale(pairs, d, seen, stale)
		if d.Watch == "" {
			listIdx = meta.LastIndex
			continue
		}
		// Block on the predecessor's key only, then read the prefix.
		_, _, err = kv.Get(d.Watch, (&api.QueryOptions{WaitIndex: d.WatchIdx, WaitTime: min(s.o.WaitTime, s.o.StaleAfter)}).WithContext(ctx))
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("semaphore: watching %s: %v", d.Watch, err)
		}
		listIdx = 0
	}
}

// markStale notes the waiters ahead that stay unchanged while tokens are
// free, and adds to stale those unchanged for StaleAfter.
func (s *Semaphore) markStale(pairs api.KVPairs, d Decision, seen map[string]time.Time, stale map[string]uint64) {
	if d.Free <= 0 {
		clear(seen)
		return
	}
	now := time.Now()
	for _, p := range pairs {
		// Any waiter ahead, an older node's too: one that sees a free
		// token tries at once.
		if p.Session == "" || (p.Flags != FlagWaiting && d.Lock.Holders[p.Session]) || p.Key == s.key() || p.CreateIndex > d.Self.CreateIndex {
			continue
		}
		id := fmt.Sprintf("%s@%d", p.Key, p.ModifyIndex)
		if t, ok := seen[id]; !ok {
			seen[id] = now
		} else if now.Sub(t) >= s.o.StaleAfter {
			stale[p.Key] = p.ModifyIndex
		}
	}
}

// tryAcquire CASes .lock with the session among its holders and marks the
// contender key holding, in one transaction: true when it succeeded.
func (s *Semaphore) tryAcquire(ctx context.Context, d Decision) bool {
	l := Lock{Limit: s.o.Limit, Holders: map[string]bool{}}
	if d.Several {
		l.Limit = -s.o.Limit // older nodes, which count a session once, stand aside
	}
	for h := range d.Lock.Holders {
		l.Holders[h] = true
	}
	l.Holders[s.o.Session] = true
	l.By = fmt.Sprintf("%s@%d", s.key(), d.LockIdx)
	b, _ := json.Marshal(l)
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: path.Join(s.o.Prefix, LockKey), Value: b, Flags: api.SemaphoreFlagValue, Index: d.LockIdx}},
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: s.key(), Value: s.o.Value, Flags: FlagHolding, Session: s.o.Session}},
	}
	ok, _, _, err := s.c.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	return err == nil && ok
}

// hold starts watching the contender key and returns the lost channel.
func (s *Semaphore) hold(idx uint64) <-chan struct{} {
	s.held = true
	s.done = make(chan struct{})
	lost := make(chan struct{})
	go s.monitor(idx, lost, s.done)
	return lost
}

// monitor closes lost once the contender key is not held by the session
// any more, or Release was called.
func (s *Semaphore) monitor(idx uint64, lost chan struct{}, done chan struct{}) {
	defer close(lost)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-done
		cancel()
	}()
	fails := 0
	for ctx.Err() == nil {
		p, meta, err := s.c.KV().Get(s.key(), (&api.QueryOptions{WaitIndex: idx, WaitTime: s.o.WaitTime, RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			// A Consul that does not answer for a moment does not take
			// the token away; the session's own lease decides that.
			if fails++; fails > 5 {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		fails = 0
		if p == nil || p.Session != s.o.Session {
			return
		}
		idx = meta.LastIndex
	}
}

// waiting says whether a live contender key of this package waits.
func waiting(pairs api.KVPairs) bool {
	for _, p := range pairs {
		if p.Session != "" && p.Flags == FlagWaiting {
			return true
		}
	}
	return false
}

// giveUp deletes the contender key of a waiter that stops waiting (its
// successor wakes) or of a holder whose release failed, trying for a while
// when Consul does not answer.
func (s *Semaphore) giveUp() {
	del := func() bool {
		_, err := s.c.KV().Delete(s.key(), nil)
		return err == nil
	}
	if del() {
		// The waiters behind may all have gone: the limit back for the
		// older nodes, as a release does.
		s.restoreLimit()
		return
	}
	go func() {
		for i := 0; i < 10; i++ {
			time.Sleep(time.Second)
			if del() {
				return
			}
		}
	}()
}

// Release gives the token back: it deletes the contender key (one write,
// which no other write can make fail; the first waiter wakes). .lock keeps
// the session until the next acquisition's CAS prunes it: a holder counts
// only while its contender key lives and is not waiting.
func (s *Semaphore) Release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.held {
		return api.ErrSemaphoreNotHeld
	}
	s.held = false
	close(s.done)
	_, err := s.c.KV().Delete(s.key(), nil)
	if err != nil {
		// Kept, the token would stay taken as long as the session.
		s.giveUp()
		return err
	}
	s.restoreLimit()
	return nil
}

// restoreLimit writes .lock's Limit back to limit when it reads -limit
// and, this token given back, no session holds several, and no waiter of
// this package is there to do it with its acquisition: otherwise an
// older node, which takes -limit for another limit, would stand aside
// until some new node's next acquisition, and for good when none comes
// (the last release of a batch left it negative). While new waiters
// queue (a rollout under way), their acquisitions write the limit as it
// should be, and a CAS here would only be one more write racing theirs.
// A waiter that gives up instead looks again (giveUp). Best effort: a failed
// CAS means another write moved .lock, and the acquisition that wrote it
// set the limit as it should be. It is safe as an acquisition's CAS is:
// the holders written are those of the read, pruned of the dead, and a
// CAS computed from an older read fails.
func (s *Semaphore) restoreLimit() {
	lockKey := path.Join(s.o.Prefix, LockKey)
	for range 3 {
		pairs, _, err := s.c.KV().List(s.o.Prefix, nil)
		if err != nil {
			return
		}
		d, err := Decide(pairs, s.o.Prefix, s.o.Name, s.o.Session, s.o.Limit, nil)
		if err != nil || !d.Negative || d.Any || d.LockIdx == 0 || waiting(pairs) {
			return
		}
		l := d.Lock
		l.Limit = s.o.Limit
		l.By = fmt.Sprintf("release:%s@%d", s.key(), d.LockIdx)
		b, _ := json.Marshal(l)
		ok, _, err := s.c.KV().CAS(&api.KVPair{Key: lockKey, Value: b, Flags: api.SemaphoreFlagValue, ModifyIndex: d.LockIdx}, nil)
		if err != nil || ok {
			return
		}
	}
}
