package leader

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// Term is one period of leadership: one session holding the lock once.
type Term struct {
	Key     string // the lock key
	Session string // the session holding it (MARIPOSA_LEADER_SESSION)
	// Index is the fencing token (MARIPOSA_LEADER_INDEX): Key's ModifyIndex
	// right after the acquisition; check-index on Key with it fails once the
	// lock has moved.
	Index     uint64
	LockIndex uint64    // how many times Key has been acquired, this time included
	Started   time.Time // when the acquisition was confirmed, on Config.Now's clock

	e         *Elector
	s         *session
	mu        sync.Mutex
	confirmed time.Time // send time of the latest confirmation
	lost      chan struct{}
	expired   chan struct{}
	err       error
	deadline  time.Time
}

// Lost closes when the term ends for any reason: stop the leader-only work.
func (t *Term) Lost() <-chan struct{} { return t.lost }

// Expired closes when leadership is, or must be assumed, gone (Err wraps
// ErrLost), possibly after Lost closed for a voluntary stop. Leader-only
// work still running then must be killed at once.
func (t *Term) Expired() <-chan struct{} { return t.expired }

// Err says why the term ended; nil while it lasts.
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Deadline is zero until Expired closes; then it is the earliest moment
// another instance could hold the lock (last confirmation + lock delay), on
// Config.Now's clock. The leader-only work must have stopped by then.
func (t *Term) Deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}

func (t *Term) isExpired() bool {
	select {
	case <-t.expired:
		return true
	default:
		return false
	}
}

// confirm records that a read sent at sent showed the lock held. A late
// answer never revives a term whose confirmation already got too old.
func (t *Term) confirm(sent time.Time) {
	now := t.e.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isExpired() {
		return
	}
	if age := now.Sub(t.confirmed); age > t.e.t.loseAfter {
		t.expireLocked(now, fmt.Errorf("%w (last confirmed %v ago)", ErrUnconfirmed, age.Round(time.Millisecond)))
		return
	}
	if sent.After(t.confirmed) {
		t.confirmed = sent
	}
}

// check ends the term when its confirmation or the session's renewal is too old.
func (t *Term) check(now time.Time) {
	renewed := t.s.renewedAt()
	t.mu.Lock()
	defer t.mu.Unlock()
	if age := now.Sub(t.confirmed); age > t.e.t.loseAfter {
		t.expireLocked(now, fmt.Errorf("%w (last confirmed %v ago)", ErrUnconfirmed, age.Round(time.Millisecond)))
	} else if age := now.Sub(renewed); age > t.e.t.ttl {
		t.expireLocked(now, fmt.Errorf("%w (last renewed %v ago)", ErrNotRenewed, age.Round(time.Millisecond)))
	}
}

func (t *Term) expire(err error) {
	now := t.e.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now, err)
}

func (t *Term) expireLocked(now time.Time, err error) {
	if t.isExpired() {
		return
	}
	t.deadline = t.confirmed.Add(t.e.t.lockDelay)
	close(t.expired)
	if t.err == nil {
		t.err = err
		close(t.lost)
	}
	t.e.log.Warn("leadership lost: stop leader-only work now", "session", t.Session,
		"reason", err, "deadline_in", t.deadline.Sub(now).Round(time.Millisecond))
}

// end ends the term voluntarily (or records the first reason).
func (t *Term) end(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
		close(t.lost)
	}
}

// Holder is what Consul says about a lock key.
type Holder struct {
	Key       string
	Session   string // the holding session; "" when nobody holds the lock
	Node      string // the holding session's node, when known
	Value     []byte // written by the holder (or the last holder)
	Index     uint64 // the key's ModifyIndex
	LockIndex uint64
}

// Lookup reads who holds key, with a consistent read.
func Lookup(ctx context.Context, c *api.Client, key string) (Holder, error) {
	q := (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
	pair, _, err := c.KV().Get(key, q)
	if err != nil {
		return Holder{}, err
	}
	h := Holder{Key: key}
	if pair == nil {
		return h, nil
	}
	h.Session, h.Value, h.Index, h.LockIndex = pair.Session, pair.Value, pair.ModifyIndex, pair.LockIndex
	if h.Session != "" {
		se, _, err := c.Session().Info(h.Session, q)
		if err != nil {
			return h, err
		}
		if se != nil {
			h.Node = se.Node
		}
	}
	return h, nil
}
