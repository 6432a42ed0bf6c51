package leader

import (
	"errors"
	"testing"
	"time"
)

// newTestTerm is a term of an elector that never talks to Consul, for the
// bookkeeping alone.
func newTestTerm(clock *fakeClock) *Term {
	e := New(Config{Key: "k", Now: clock.Now, SessionTTL: 10 * time.Second, LockDelay: time.Second})
	now := clock.Now()
	return &Term{Key: "k", Session: "s", e: e, s: &session{id: "s", renewed: now, invalid: make(chan struct{})},
		confirmed: now, lost: make(chan struct{}), expired: make(chan struct{})}
}

func TestTermBounds(t *testing.T) {
	e := New(Config{})
	if e.t.confirmWait != 200*time.Millisecond || e.t.loseAfter != 500*time.Millisecond ||
		e.t.tick != 50*time.Millisecond || e.t.lockDelay != time.Second || e.t.ttl != 10*time.Second {
		t.Fatalf("default timing %+v", e.t)
	}
	if len(e.checks) != 1 || e.checks[0] != SerfCheck {
		t.Fatalf("checks %v", e.checks)
	}
	e = New(Config{Checks: []string{"x", SerfCheck, "x"}})
	if len(e.checks) != 2 || e.checks[0] != SerfCheck || e.checks[1] != "x" {
		t.Fatalf("checks %v", e.checks)
	}
}

func TestTermConfirmations(t *testing.T) {
	clock := &fakeClock{}
	tm := newTestTerm(clock)
	start := tm.confirmed

	// Confirmations within the bound keep the term and move its base.
	clock.Jump(400 * time.Millisecond)
	tm.confirm(clock.Now().Add(-10 * time.Millisecond))
	tm.check(clock.Now())
	if tm.isExpired() || tm.Err() != nil || !tm.confirmed.After(start) {
		t.Fatalf("term ended or not confirmed: %v", tm.Err())
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
	tm.end(ErrStopped)
	if !errors.Is(tm.Err(), ErrUnconfirmed) || !tm.Deadline().Equal(base.Add(time.Second)) {
		t.Fatalf("finished term changed: %v %v", tm.Err(), tm.Deadline())
	}
}

func TestTermVoluntaryThenLost(t *testing.T) {
	clock := &fakeClock{}
	tm := newTestTerm(clock)
	tm.end(ErrStopped)
	if tm.Err() != ErrStopped || tm.isExpired() || !tm.Deadline().IsZero() {
		t.Fatalf("after stop: %v expired %v deadline %v", tm.Err(), tm.isExpired(), tm.Deadline())
	}
	// While the work stops, the session is renewed but the confirmations
	// stop: Expired closes, Err keeps the first reason.
	clock.Jump(2 * time.Second)
	tm.check(clock.Now())
	if !tm.isExpired() || tm.Err() != ErrStopped || tm.Deadline().IsZero() {
		t.Fatalf("after stale: %v expired %v deadline %v", tm.Err(), tm.isExpired(), tm.Deadline())
	}
}

func TestTermNotRenewed(t *testing.T) {
	clock := &fakeClock{}
	tm := newTestTerm(clock)
	// Confirmations keep coming, but no renewal succeeded for a whole TTL.
	for range 26 {
		clock.Jump(400 * time.Millisecond)
		tm.confirm(clock.Now())
		tm.check(clock.Now())
	}
	if !errors.Is(tm.Err(), ErrNotRenewed) {
		t.Fatalf("err %v, want ErrNotRenewed", tm.Err())
	}
}
