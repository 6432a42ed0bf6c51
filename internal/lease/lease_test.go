package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestSeveralHolds: three holds on one lease share its session and cost one
// confirmation read per round; deleting one key ends only that hold; the
// session's invalidation ends all of them, and the next terms get a new
// session.
func TestSeveralHolds(t *testing.T) {
	c := dev(t)
	live := consultest.StartLiveness(t, c, "n1")
	l := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "lease")})
	t.Cleanup(l.Close)
	ctx := context.Background()

	keys := []string{"mariposa/leader/a", "mariposa/leader/b", "mariposa/slots/s/0"}
	terms := map[string]*Term{}
	for _, k := range keys {
		tm, err := l.Acquire(ctx, Hold{Key: k, Value: []byte("n1")})
		if err != nil {
			t.Fatalf("acquire %s: %v", k, err)
		}
		terms[k] = tm
	}
	s1 := terms[keys[0]].Session
	for _, tm := range terms {
		if tm.Session != s1 || tm.Index == 0 {
			t.Fatalf("term %+v: want session %s", tm, s1)
		}
	}
	if ss, _, err := c.Session().List(nil); err != nil || len(ss) != 1 {
		t.Fatalf("sessions %v %v, want the lease's one", ss, err)
	}

	// One read per round for the three keys: about 2s / (lock_delay/5).
	st0 := l.Stats()
	time.Sleep(2 * time.Second)
	st := l.Stats()
	rounds, reads := st.Rounds-st0.Rounds, st.Reads-st0.Reads
	t.Logf("2s with 3 holds: %d rounds, %d reads", rounds, reads)
	if reads != rounds || rounds < 5 || rounds > 12 {
		t.Fatalf("%d rounds, %d reads in 2s; want one read per round, every 200ms", rounds, reads)
	}
	for k, tm := range terms {
		if tm.Err() != nil {
			t.Fatalf("%s ended: %v", k, tm.Err())
		}
	}

	// Deleting one key ends only its hold.
	if _, err := c.KV().Delete(keys[1], nil); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, terms[keys[1]].Expired(), 2*time.Second, "the deleted key's term")
	if !errors.Is(terms[keys[1]].Err(), ErrLockLost) {
		t.Fatalf("deleted key's term ended with %v", terms[keys[1]].Err())
	}
	time.Sleep(time.Second) // several rounds
	for _, k := range []string{keys[0], keys[2]} {
		if terms[k].Err() != nil {
			t.Fatalf("%s ended with the other key: %v", k, terms[k].Err())
		}
	}
	// Its owner releases it and holds it again, under the same session.
	if err := terms[keys[1]].Release(); err != nil {
		t.Fatal(err)
	}
	tb, err := l.Acquire(ctx, Hold{Key: keys[1], Value: []byte("n1")})
	if err != nil {
		t.Fatal(err)
	}
	if tb.Session != s1 || tb.Index <= terms[keys[1]].Index {
		t.Fatalf("re-held %+v after %+v", tb, terms[keys[1]])
	}
	terms[keys[1]] = tb

	// The session is invalidated: every hold ends, together.
	if _, err := c.Session().Destroy(s1, nil); err != nil {
		t.Fatal(err)
	}
	var ended []time.Time
	for _, k := range keys {
		waitClosed(t, terms[k].Expired(), 2*time.Second, k+" after the session was destroyed")
		ended = append(ended, time.Now())
		if !errors.Is(terms[k].Err(), ErrLost) {
			t.Fatalf("%s ended with %v", k, terms[k].Err())
		}
	}
	if spread := ended[len(ended)-1].Sub(ended[0]); spread > 500*time.Millisecond {
		t.Fatalf("the holds ended %v apart", spread)
	}
	for _, tm := range terms {
		_ = tm.Release()
	}
	// A lost session is never used again.
	tn, err := l.Acquire(ctx, Hold{Key: keys[0]})
	for errors.Is(err, ErrRetired) { // the loss may be learned while contending
		tn, err = l.Acquire(ctx, Hold{Key: keys[0]})
	}
	if err != nil {
		t.Fatal(err)
	}
	if tn.Session == s1 {
		t.Fatal("the lost session was used again")
	}
	_ = tn.Release()
}

// TestSessionWaitsForChecks: a session created before the liveness check
// it is bound to reaches the catalog (a fresh node: the registration is on
// its way) waits for it, and Consul never refuses it: no "Missing check
// registration" error, no failed creation, nothing for the owner but the
// term.
func TestSessionWaitsForChecks(t *testing.T) {
	c := dev(t)
	live := consultest.NewLiveness(c, "fresh")
	l := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "lease")})
	t.Cleanup(l.Close)
	type result struct {
		t   *Term
		err error
	}
	got := make(chan result, 1)
	go func() {
		tm, err := l.Acquire(context.Background(), Hold{Key: "mariposa/leader/fresh"})
		got <- result{tm, err}
	}()
	// The supervisor registers its liveness check asynchronously, just
	// after (or before) its electors start.
	time.Sleep(300 * time.Millisecond)
	if err := live.Register(); err != nil {
		t.Fatal(err)
	}
	live.Heartbeat(t)
	var r result
	select {
	case r = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("no term 15s after the check was registered")
	}
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	if st := l.Stats(); st.CreateFailures != 0 || st.Sessions != 1 {
		t.Fatalf("stats %+v: want one session, created without a refusal", st)
	}
	_ = r.t.Release()

	// A critical check is waited for the same way.
	l2 := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "lease2")})
	t.Cleanup(l2.Close)
	live.Paused.Store(true)
	if err := c.Agent().UpdateTTL(live.CheckID, "down", "critical"); err != nil {
		t.Fatal(err)
	}
	go func() {
		tm, err := l2.Acquire(context.Background(), Hold{Key: "mariposa/leader/fresh2"})
		got <- result{tm, err}
	}()
	time.Sleep(500 * time.Millisecond)
	if l2.Stats().Sessions != 0 {
		t.Fatal("a session was created while its check was critical")
	}
	live.Paused.Store(false)
	if err := c.Agent().UpdateTTL(live.CheckID, "up", "passing"); err != nil {
		t.Fatal(err)
	}
	select {
	case r = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("no term 15s after the check passed")
	}
	if r.err != nil || l2.Stats().CreateFailures != 0 {
		t.Fatalf("Acquire: %v, stats %+v", r.err, l2.Stats())
	}
	_ = r.t.Release()
}

// TestManager: one lease per (TTL, lock delay).
func TestManager(t *testing.T) {
	m := NewManager(Config{})
	a, b := m.Lease(0, 0), m.Lease(DefaultTTL, DefaultLockDelay)
	c := m.Lease(0, 3*time.Second)
	if a != b || a == c || c.LockDelay() != 3*time.Second || a.TTL() != DefaultTTL {
		t.Fatal("leases not shared by (ttl, lock delay)")
	}
	m.Close()
	if _, err := a.Acquire(context.Background(), Hold{Key: "k"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
}

// TestUnconfirmedHold: a hold that fences nothing time-critical (the node
// lock) costs no confirmation reads, and still ends with its session.
func TestUnconfirmedHold(t *testing.T) {
	c := dev(t)
	live := consultest.StartLiveness(t, c, "n1")
	l := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "lease")})
	t.Cleanup(l.Close)
	tm, err := l.Acquire(context.Background(), Hold{Key: "mariposa/nodes/n1/supervisor", Unconfirmed: true})
	if err != nil {
		t.Fatal(err)
	}
	st0 := l.Stats()
	time.Sleep(2 * time.Second) // ten rounds' worth for a confirmed hold
	if st := l.Stats(); st.Reads != st0.Reads || tm.Err() != nil {
		t.Fatalf("an unconfirmed hold cost %d reads in 2s (ended: %v)", st.Reads-st0.Reads, tm.Err())
	}
	// Its session invalidated (as when mariposa's liveness check expires):
	// the hold ends at the next renewal (TTL/2 = 5s).
	if _, err := c.Session().Destroy(tm.Session, nil); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, tm.Lost(), 8*time.Second, "the unconfirmed hold after its session was destroyed")
}
