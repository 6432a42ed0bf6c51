package lease

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is time.Now plus an offset a test can jump.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) Now() time.Time       { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *fakeClock) Jump(d time.Duration) { c.off.Add(int64(d)) }

// newTestLease is a lease that never talks to Consul, for the bookkeeping
// alone, with one session "s" whose loops do not run.
func newTestLease(clock *fakeClock) (*Lease, *session) {
	l := New(Config{Now: clock.Now, TTL: 10 * time.Second, LockDelay: time.Second})
	s := newSession(l, "s", clock.Now())
	l.cur = s
	l.live[s] = struct{}{}
	return l, s
}

// newTestTerm is a term of key under s, acquired now.
func newTestTerm(l *Lease, s *session, key string) *Term {
	t := newTerm(l, s, key, nil, l.log, l.now())
	l.mu.Lock()
	s.terms[t] = struct{}{}
	l.keys[key] = keyHeld
	l.mu.Unlock()
	return t
}

// Moved from internal/leader (TestTermBounds): the defaults and the bounds
// derived from them.
func TestTermBounds(t *testing.T) {
	l := New(Config{})
	if l.t.round != 200*time.Millisecond || l.t.loseAfter != 500*time.Millisecond ||
		l.t.tick != 50*time.Millisecond || l.t.lockDelay != time.Second || l.t.ttl != 10*time.Second {
		t.Fatalf("default timing %+v", l.t)
	}
	if len(l.checks) != 1 || l.checks[0] != SerfCheck {
		t.Fatalf("checks %v", l.checks)
	}
	l = New(Config{Checks: []string{"x", SerfCheck, "x"}})
	if len(l.checks) != 2 || l.checks[0] != SerfCheck || l.checks[1] != "x" {
		t.Fatalf("checks %v", l.checks)
	}
}

func TestTermConfirmations(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	tm := newTestTerm(l, s, "k")
	start := tm.confirmed

	// Confirmations within the bound keep the term and move its base.
	clock.Jump(400 * time.Millisecond)
	tm.confirm(clock.Now().Add(-10 * time.Millisecond))
	if err := tm.check(clock.Now(), s.renewedAt()); err != nil || tm.isExpired() || tm.Err() != nil || !tm.confirmed.After(start) {
		t.Fatalf("term ended or not confirmed: %v %v", err, tm.Err())
	}
	// An older answer does not move the confirmation back.
	base := tm.confirmed
	tm.confirm(start)
	if !tm.confirmed.Equal(base) {
		t.Fatal("an older confirmation moved the base back")
	}

	// A fresh answer that arrives after the bound passed does not revive
	// the term: the work must already be stopping.
	clock.Jump(600 * time.Millisecond)
	tm.confirm(clock.Now())
	if !tm.isExpired() || !errors.Is(tm.Err(), ErrUnconfirmed) || !errors.Is(tm.Err(), ErrLost) {
		t.Fatalf("late confirmation: expired %v, err %v", tm.isExpired(), tm.Err())
	}
	if want := base.Add(time.Second); !tm.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want last confirmation + lock delay %v", tm.Deadline(), want)
	}
	select {
	case <-tm.Lost():
	default:
		t.Fatal("Lost not closed")
	}
	// Nothing changes a finished term.
	tm.confirm(clock.Now())
	tm.expire(ErrSessionInvalid)
	tm.End(ErrReleased)
	if !errors.Is(tm.Err(), ErrUnconfirmed) || !tm.Deadline().Equal(base.Add(time.Second)) {
		t.Fatalf("finished term changed: %v %v", tm.Err(), tm.Deadline())
	}
}

func TestTermVoluntaryThenLost(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	tm := newTestTerm(l, s, "k")
	stopped := errors.New("stopped")
	tm.End(stopped)
	if tm.Err() != stopped || tm.isExpired() || !tm.Deadline().IsZero() {
		t.Fatalf("after stop: %v expired %v deadline %v", tm.Err(), tm.isExpired(), tm.Deadline())
	}
	// While the work stops, the session is renewed but the confirmations
	// stop: Expired closes, Err keeps the first reason.
	clock.Jump(2 * time.Second)
	tm.check(clock.Now(), clock.Now())
	if !tm.isExpired() || tm.Err() != stopped || tm.Deadline().IsZero() {
		t.Fatalf("after stale: %v expired %v deadline %v", tm.Err(), tm.isExpired(), tm.Deadline())
	}
}

func TestTermNotRenewed(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	tm := newTestTerm(l, s, "k")
	// Confirmations keep coming, but no renewal succeeded for a whole TTL.
	for range 26 {
		clock.Jump(400 * time.Millisecond)
		tm.confirm(clock.Now())
		tm.check(clock.Now(), s.renewedAt())
	}
	if !errors.Is(tm.Err(), ErrNotRenewed) {
		t.Fatalf("err %v, want ErrNotRenewed", tm.Err())
	}
}
