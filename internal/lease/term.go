package lease

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/holdrule"
)

// Term is one period during which a hold's key is locked by the lease's
// session: from the acquisition to Release.
type Term struct {
	Key     string // the lock key
	Session string // the session holding it
	// Index is the fencing token: Key's ModifyIndex right after the
	// acquisition; check-index on Key with it fails once the lock has moved.
	Index     uint64
	LockIndex uint64    // how many times Key has been acquired, this time included
	Started   time.Time // when the acquisition was confirmed, on Config.Now's clock

	l           *Lease
	s           *session
	value       []byte
	releaseOps  api.TxnOps // ReleaseWith's
	log         hclog.Logger
	releaseOnce sync.Once
	released    atomic.Bool // its owner released it: nothing more to say
	unconfirmed bool        // Hold.Unconfirmed

	mu        sync.Mutex
	confirmed time.Time          // send time of the latest confirmation
	failed    []holdrule.Attempt // failed confirmations sent after it
	lost      chan struct{}
	expired   chan struct{}
	err       error
	deadline  time.Time
}

func newTerm(l *Lease, s *session, key string, value []byte, log hclog.Logger, confirmed time.Time) *Term {
	return &Term{Key: key, Session: s.id, Started: confirmed, l: l, s: s, value: value, log: log,
		confirmed: confirmed, lost: make(chan struct{}), expired: make(chan struct{})}
}

// Lost closes when the term ends for any reason: stop the work the lock
// guards.
func (t *Term) Lost() <-chan struct{} { return t.lost }

// Expired closes when the lock is, or must be assumed, gone (Err wraps
// ErrLost), possibly after Lost closed for a voluntary end. Work still
// running then must be killed at once.
func (t *Term) Expired() <-chan struct{} { return t.expired }

// Err says why the term ended; nil while it lasts.
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Deadline is zero until Expired closes; then it is the earliest moment
// another session could hold the lock (last confirmation + lock delay, or
// + Config.Detect + lock delay when the servers had no leader since; see
// internal/holdrule), on Config.Now's clock. The guarded work must have stopped by then.
func (t *Term) Deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}

// End ends the term voluntarily with reason, unless it already ended (the
// first reason stays). The key stays locked, and confirmed, until Release.
func (t *Term) End(reason error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = reason
		close(t.lost)
	}
}

// Release ends the term (ErrReleased if it lasted), releases the key if the
// session still holds it (a released key has no lock delay, so another
// contender takes it at once) and detaches the term from the lease. Call
// it once the guarded work has stopped; calls after the first do nothing.
// When Consul cannot be reached, the release is retried in the background
// and the key cannot be acquired again under this lease until it succeeded.
func (t *Term) Release() error {
	t.End(ErrReleased)
	var err error
	t.releaseOnce.Do(func() { err = t.l.detach(t) })
	return err
}

// ReleaseWith is Release that leaves value in the key and applies ops in
// the same transaction as the unlock: a record of the release that exists
// exactly when the release does. Retried releases carry both.
func (t *Term) ReleaseWith(value []byte, ops api.TxnOps) error {
	t.End(ErrReleased)
	var err error
	t.releaseOnce.Do(func() {
		t.mu.Lock()
		t.value, t.releaseOps = value, ops
		t.mu.Unlock()
		err = t.l.detach(t)
	})
	return err
}

// LastConfirmed is the send time of the latest read that showed the key
// held by the session, on Config.Now's clock.
func (t *Term) LastConfirmed() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed
}

// StrictDeadline is the moment the term's last confirmation stops
// covering the work it guards when nothing more is known (holdrule's
// strict rule: last confirmation + lock delay/2). An upgrade in place
// hands it to the next image, whose adopted work dies then unless a read
// confirms the hold again first.
func (t *Term) StrictDeadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.s.rule.Strict(t.confirmed)
}

func (t *Term) isExpired() bool { return isClosed(t.expired) }

// confirm records that a read sent at sent showed the lock held. A late
// answer never revives a term whose confirmation already got too old.
func (t *Term) confirm(sent time.Time) {
	now := t.l.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isExpired() {
		return
	}
	if t.s.rule.Lost(now, t.confirmed, t.failed) {
		t.expireLocked(now, t.unconfirmedErr(now))
		return
	}
	if sent.After(t.confirmed) {
		t.confirmed = sent
		kept := t.failed[:0]
		for _, a := range t.failed {
			if a.Sent.After(sent) {
				kept = append(kept, a)
			}
		}
		t.failed = kept
	}
}

// fail records that a confirmation sent at sent failed, and what that
// proves (holdrule.Kind).
func (t *Term) fail(sent time.Time, kind holdrule.Kind) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isExpired() || !sent.After(t.confirmed) {
		return
	}
	t.failed = append(t.failed, holdrule.Attempt{Sent: sent, Kind: kind})
}

// unconfirmedErr says how old the last confirmation is, and whether the
// deadline was extended for a Consul election. t.mu is held.
func (t *Term) unconfirmedErr(now time.Time) error {
	age := now.Sub(t.confirmed).Round(time.Millisecond)
	if t.s.rule.Deadline(t.confirmed, t.failed).After(t.s.rule.Strict(t.confirmed)) {
		return fmt.Errorf("%w (last confirmed %v ago; the servers had no leader since)", ErrUnconfirmed, age)
	}
	return fmt.Errorf("%w (last confirmed %v ago)", ErrUnconfirmed, age)
}

// check ends the term when its confirmation or the session's renewal is
// too old, and returns why; nil when it lasts (or had already expired).
func (t *Term) check(now, renewed time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isExpired() {
		return nil
	}
	var err error
	if t.s.rule.Lost(now, t.confirmed, t.failed) {
		err = t.unconfirmedErr(now)
	} else if age := now.Sub(renewed); age > t.l.t.ttl {
		err = fmt.Errorf("%w (last renewed %v ago)", ErrNotRenewed, age.Round(time.Millisecond))
	}
	if err != nil {
		t.expireLocked(now, err)
	}
	return err
}

// stale reports whether the acquisition itself is too old to trust.
func (t *Term) stale(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return now.Sub(t.confirmed) > t.l.t.loseAfter
}

func (t *Term) expire(err error) {
	now := t.l.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now, err)
}

func (t *Term) expireLocked(now time.Time, err error) {
	if t.isExpired() || t.released.Load() {
		return
	}
	t.deadline = t.s.rule.Earliest(t.confirmed, t.failed)
	close(t.expired)
	if t.err == nil {
		t.err = err
		close(t.lost)
	}
	t.log.Warn("lock lost: stop the work it guards now", "session", t.Session,
		"reason", err, "deadline_in", t.deadline.Sub(now).Round(time.Millisecond))
}
