package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// fakeStore answers confirmation reads from a map, and records them.
type fakeStore struct {
	mu     sync.Mutex
	pairs  map[string]*api.KVPair
	reads  [][]string
	during func() // called inside the next read, once
	err    error
}

func (f *fakeStore) read(_ context.Context, keys []string) (map[string]*api.KVPair, error) {
	f.mu.Lock()
	f.reads = append(f.reads, slices.Clone(keys))
	during, err := f.during, f.err
	f.during = nil
	f.mu.Unlock()
	if during != nil {
		during()
	}
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]*api.KVPair{}
	for _, k := range keys {
		if p, ok := f.pairs[k]; ok {
			out[k] = p
		} else {
			out[k] = &api.KVPair{Key: k} // get-or-empty of a missing key
		}
	}
	return out, nil
}

func (f *fakeStore) set(key, session string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if session == "-" {
		delete(f.pairs, key)
		return
	}
	f.pairs[key] = &api.KVPair{Key: key, Session: session, ModifyIndex: 7}
}

func (f *fakeStore) readsSoFar() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reads)
}

// heldTerms makes n terms under s, each holding its key in f.
func heldTerms(l *Lease, s *session, f *fakeStore, n int) []*Term {
	var ts []*Term
	for i := range n {
		key := fmt.Sprintf("k/%03d", i)
		f.set(key, s.id)
		ts = append(ts, newTestTerm(l, s, key))
	}
	return ts
}

// TestRoundOneReadForAllHolds: ten holds of one session cost one read per
// round, which confirms each of them with the read's send time; a key that
// left the session ends only its own term.
func TestRoundOneReadForAllHolds(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	f := &fakeStore{pairs: map[string]*api.KVPair{}}
	l.read = f.read
	terms := heldTerms(l, s, f, 10)

	clock.Jump(300 * time.Millisecond)
	before := clock.Now()
	if !s.round(context.Background(), s.attached(true)) {
		t.Fatal("round failed")
	}
	reads := f.readsSoFar()
	if len(reads) != 1 || len(reads[0]) != 10 || !slices.IsSorted(reads[0]) {
		t.Fatalf("reads %v, want one read of the 10 keys", reads)
	}
	if st := l.Stats(); st.Rounds != 1 || st.Reads != 1 {
		t.Fatalf("stats %+v", st)
	}
	for _, tm := range terms {
		if tm.confirmed.Before(before) || tm.Err() != nil {
			t.Fatalf("%s not confirmed by the round: %v %v", tm.Key, tm.confirmed, tm.Err())
		}
	}

	// One key taken by another session, one deleted: those two terms end,
	// the others are confirmed by the same read.
	f.set(terms[3].Key, "other")
	f.set(terms[5].Key, "-")
	clock.Jump(300 * time.Millisecond)
	before = clock.Now()
	s.round(context.Background(), s.attached(true))
	for i, tm := range terms {
		switch i {
		case 3, 5:
			if !tm.isExpired() || !errors.Is(tm.Err(), ErrLockLost) {
				t.Fatalf("%s: expired %v err %v, want ErrLockLost", tm.Key, tm.isExpired(), tm.Err())
			}
		default:
			if tm.Err() != nil || tm.confirmed.Before(before) {
				t.Fatalf("%s ended or not confirmed: %v", tm.Key, tm.Err())
			}
		}
	}
	if !strings.Contains(terms[3].Err().Error(), "other") || !strings.Contains(terms[5].Err().Error(), "deleted") {
		t.Fatalf("reasons %v / %v", terms[3].Err(), terms[5].Err())
	}
	// The session is not lost for one key: it takes new terms.
	if s.isRetired() {
		t.Fatal("one lost key retired the session")
	}
	// The next round reads only the 8 live keys, still in one read.
	s.round(context.Background(), s.attached(true))
	if reads := f.readsSoFar(); len(reads) != 3 || len(reads[2]) != 8 {
		t.Fatalf("third read %v, want the 8 live keys", reads[len(reads)-1])
	}
}

// TestRoundNewTermNotConfirmedByEarlierRead: a read sent before a term was
// confirmed (its acquire answered after the round's read went out, while
// the read was on its way) says nothing of it: its confirmation is not moved
// back to the read's send time, whose answer may come from before the
// acquire. The round is given the late term, so only the confirmation's
// own guard keeps it (a round that took its terms after the read would do
// the same); the earlier terms are confirmed by the read as usual.
func TestRoundNewTermNotConfirmedByEarlierRead(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	f := &fakeStore{pairs: map[string]*api.KVPair{}}
	l.read = f.read
	early := heldTerms(l, s, f, 2)
	// The late term: its key held by the session, its acquire answered 50
	// ms after the read below is sent.
	f.set("late", s.id)
	late := newTerm(l, s, "late", nil, l.log, clock.Now().Add(50*time.Millisecond))
	l.mu.Lock()
	s.terms[late] = struct{}{}
	l.keys["late"] = keyHeld
	l.mu.Unlock()
	sent := clock.Now()
	f.during = func() { clock.Jump(100 * time.Millisecond) }
	if !s.round(context.Background(), s.attached(true)) {
		t.Fatal("round failed")
	}
	if reads := f.readsSoFar(); len(reads) != 1 || !slices.Contains(reads[0], "late") {
		t.Fatalf("reads %v, want one read with the late term's key", reads)
	}
	if !late.confirmed.Equal(late.Started) || late.Err() != nil {
		t.Fatalf("late term confirmed at %v (started %v, read sent %v), err %v: a read sent before the term confirmed it",
			late.confirmed, late.Started, sent, late.Err())
	}
	for _, tm := range early {
		if tm.confirmed.Before(sent) || tm.Err() != nil {
			t.Fatalf("%s not confirmed by the read: %v %v", tm.Key, tm.confirmed, tm.Err())
		}
	}
}

// TestRoundChunks: past Consul's 128 operations a round takes one read per
// 128 keys.
func TestRoundChunks(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	f := &fakeStore{pairs: map[string]*api.KVPair{}}
	l.read = f.read
	terms := heldTerms(l, s, f, 300)
	s.round(context.Background(), s.attached(true))
	reads := f.readsSoFar()
	if len(reads) != 3 || len(reads[0]) != 128 || len(reads[1]) != 128 || len(reads[2]) != 44 {
		t.Fatalf("%d reads", len(reads))
	}
	if st := l.Stats(); st.Rounds != 1 || st.Reads != 3 {
		t.Fatalf("stats %+v", st)
	}
	for _, tm := range terms {
		if tm.Err() != nil {
			t.Fatal(tm.Err())
		}
	}
}

// TestWatchdogEndsAllHoldsTogether: one watchdog for the session; when the
// reads stop answering, every hold ends at the same check, and the session
// is retired (never used again).
func TestWatchdogEndsAllHoldsTogether(t *testing.T) {
	for _, tc := range []struct {
		name string
		step func(clock *fakeClock, s *session) bool
		want error
	}{
		{"unconfirmed", func(clock *fakeClock, s *session) bool {
			clock.Jump(600 * time.Millisecond)
			return s.inspect(clock.Now(), 10*time.Millisecond)
		}, ErrUnconfirmed},
		{"clock gap", func(clock *fakeClock, s *session) bool {
			clock.Jump(time.Hour)
			return s.inspect(clock.Now(), time.Hour)
		}, ErrClockGap},
		{"not renewed", func(clock *fakeClock, s *session) bool {
			s.mu.Lock()
			s.renewed = clock.Now().Add(-11 * time.Second)
			s.mu.Unlock()
			return s.inspect(clock.Now(), 10*time.Millisecond)
		}, ErrNotRenewed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{}
			l, s := newTestLease(clock)
			f := &fakeStore{pairs: map[string]*api.KVPair{}}
			l.read = f.read
			terms := heldTerms(l, s, f, 5)
			// Within the bounds nothing happens.
			clock.Jump(100 * time.Millisecond)
			if s.inspect(clock.Now(), 50*time.Millisecond) || s.isRetired() {
				t.Fatal("fresh terms ended")
			}
			f.err = errors.New("agent unreachable")
			s.round(context.Background(), s.attached(true))
			finish := tc.step(clock, s)
			for _, tm := range terms {
				if !tm.isExpired() || !errors.Is(tm.Err(), tc.want) || tm.Deadline().IsZero() {
					t.Fatalf("%s: expired %v err %v", tm.Key, tm.isExpired(), tm.Err())
				}
			}
			if !s.isRetired() || l.cur != nil {
				t.Fatal("the session was not retired")
			}
			if finish {
				t.Fatal("finish asked for while terms are attached")
			}
			// The owners release their terms; Consul released the keys
			// already (invalid), so nothing is sent. The last release
			// finishes the session.
			s.invalidOnce.Do(func() { close(s.invalid) })
			for _, tm := range terms {
				if err := tm.Release(); err != nil {
					t.Fatal(err)
				}
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if len(l.live) != 0 || len(l.keys) != 0 || !s.finishing {
				t.Fatalf("live %d keys %v finishing %v", len(l.live), l.keys, s.finishing)
			}
		})
	}
}

// TestReserve: a key is held at most once under a lease.
func TestReserve(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	newTestTerm(l, s, "k")
	if _, err := l.Acquire(context.Background(), Hold{Key: "k"}); err == nil || !strings.Contains(err.Error(), "already held") {
		t.Fatalf("second hold of k: %v", err)
	}
	if _, err := l.Acquire(context.Background(), Hold{}); err == nil {
		t.Fatal("a hold without a key was accepted")
	}
}

// TestConfirmNowMovesTheStrictDeadline: Manager.ConfirmNow (an upgrade in
// place, just before the exec) confirms every confirmed hold of the
// current sessions with a read sent now, so the strict deadline handed to
// the next image counts from now, not from the last periodic round; an
// unconfirmed hold is not read.
func TestConfirmNowMovesTheStrictDeadline(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	f := &fakeStore{pairs: map[string]*api.KVPair{}}
	l.read = f.read
	terms := heldTerms(l, s, f, 2)
	terms[1].unconfirmed = true
	m := NewManager(Config{})
	m.leases[[2]time.Duration{10 * time.Second, time.Second}] = l

	clock.Jump(150 * time.Millisecond)
	old := terms[0].StrictDeadline()
	want := clock.Now().Add(500 * time.Millisecond)
	m.ConfirmNow(context.Background())
	if got := terms[0].StrictDeadline(); got.Before(want) || !want.After(old) {
		t.Fatalf("strict deadline %v after ConfirmNow, want %v (was %v)", terms[0].StrictDeadline(), want, old)
	}
	if reads := f.readsSoFar(); len(reads) != 1 || !slices.Equal(reads[0], []string{terms[0].Key}) {
		t.Fatalf("reads %v, want one of %s", reads, terms[0].Key)
	}
}
