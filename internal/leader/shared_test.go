package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
	"github.com/mariposa-sh/mariposa/internal/lease"
)

// TestSharedLease: two electors per node on the node's lease. A node's
// leaders share its one session; a graceful stop hands one key over at once
// and leaves the other term and the session alone; the session's
// invalidation ends the node's terms, the other node leads after their
// deadline, and the electors contend again under one new session.
func TestSharedLease(t *testing.T) {
	_, c, live := devSetup(t)
	leases := map[string]*lease.Lease{}
	for _, n := range []string{"a", "b"} {
		l := lease.New(lease.Config{Client: c, Checks: []string{live[n].CheckID}, Log: consultest.Logger(t, "lease-"+n)})
		t.Cleanup(l.Close)
		leases[n] = l
	}
	const k1, k2 = "mariposa/leader/one", "mariposa/leader/two"
	var rec1, rec2 leadertest.Recorder
	a1 := startContender(t, "a", Config{Lease: leases["a"], Key: k1}, &rec1, nil)
	a2 := startContender(t, "a", Config{Lease: leases["a"], Key: k2}, &rec2, nil)
	t1, t2 := a1.waitTerm(t, 20*time.Second), a2.waitTerm(t, 20*time.Second)
	sa := leases["a"].Session()
	if t1.Session != sa || t2.Session != sa {
		t.Fatalf("terms %s, %s; want a's one session %s", t1.Session, t2.Session, sa)
	}
	b1 := startContender(t, "b", Config{Lease: leases["b"], Key: k1}, &rec1, nil)
	b2 := startContender(t, "b", Config{Lease: leases["b"], Key: k2}, &rec2, nil)
	if !consultest.WaitFor(10*time.Second, func() bool {
		ss, _, err := c.Session().List(nil)
		return err == nil && len(ss) == 2 && leases["b"].Session() != ""
	}) {
		t.Fatal("want one session per node")
	}

	// a stops leading k1: b takes it at once; a keeps k2 and its session.
	a1.stop(t)
	tb1 := b1.waitTerm(t, 5*time.Second)
	if ra := a1.records(); len(ra) != 1 || !errors.Is(ra[0].err, ErrStopped) {
		t.Fatalf("a1's terms %v", ra)
	}
	if t2.Err() != nil || leases["a"].Session() != sa {
		t.Fatalf("a's other term or session changed: %v, %s", t2.Err(), leases["a"].Session())
	}
	if se, _, err := c.Session().Info(sa, nil); err != nil || se == nil {
		t.Fatalf("a's session gone after one of its electors stopped: %v", err)
	}
	if h, _ := Lookup(context.Background(), c, k1); h.Session != tb1.Session {
		t.Fatalf("k1 held by %s, want b's %s", h.Session, tb1.Session)
	}

	// a's liveness check goes critical, which invalidates its session:
	// a's term ends, b leads k2 after its deadline, and once a's check
	// passes again a contends again under one new session.
	a1 = startContender(t, "a", Config{Lease: leases["a"], Key: k1}, &rec1, nil)
	live["a"].Paused.Store(true)
	if err := c.Agent().UpdateTTL(live["a"].CheckID, "fault", "critical"); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, t2.Expired(), 5*time.Second, "a's k2 term after its session was destroyed")
	if !errors.Is(t2.Err(), ErrLost) {
		t.Fatalf("a's k2 term ended with %v", t2.Err())
	}
	tb2 := b2.waitTerm(t, 10*time.Second)
	if !tb2.Started.After(t2.Deadline()) {
		t.Fatalf("b leads k2 from %v, before a's deadline %v", tb2.Started, t2.Deadline())
	}
	live["a"].Paused.Store(false)
	if !consultest.WaitFor(10*time.Second, func() bool {
		s := leases["a"].Session()
		return s != "" && s != sa
	}) {
		t.Fatal("a's electors did not contend again under a new session")
	}
	if ss, _, err := c.Session().List(nil); err != nil || len(ss) != 2 {
		t.Fatalf("%d sessions, want one per node", len(ss))
	}
	for _, ct := range []*contender{a1, a2, b1, b2} {
		ct.stop(t)
	}
	if err := leadertest.CheckNoOverlap(rec1.Intervals()); err != nil {
		t.Fatal(err)
	}
	if err := leadertest.CheckNoOverlap(rec2.Intervals()); err != nil {
		t.Fatal(err)
	}
}

// TestRunAgain: an elector with a lease of its own leads again in a second
// Run after the first returned.
func TestRunAgain(t *testing.T) {
	_, c, live := devSetup(t)
	cfg := cfgFor(c, "mariposa/leader/again", live["a"])
	cfg.Log = consultest.Logger(t, "a")
	e := New(cfg)
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		led := make(chan *Term, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Run(ctx, func(tm *Term) { led <- tm; <-tm.Lost() })
		}()
		select {
		case tm := <-led:
			if tm.Err() != nil {
				t.Fatalf("run %d: %v", i, tm.Err())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("run %d: no term", i)
		}
		cancel()
		<-done
	}
}
