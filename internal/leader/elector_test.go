package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// devSetup starts a dev agent with two liveness checks, "a" and "b".
func devSetup(t *testing.T) (*consultest.Agent, *api.Client, map[string]*consultest.Liveness) {
	t.Helper()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	live := map[string]*consultest.Liveness{"a": consultest.StartLiveness(t, c, "a"), "b": consultest.StartLiveness(t, c, "b")}
	return agent, c, live
}

func cfgFor(c *api.Client, key string, l *consultest.Liveness) Config {
	return Config{Client: c, Key: key, Checks: []string{l.CheckID}}
}

func TestAcquireWaitRelease(t *testing.T) {
	_, c, live := devSetup(t)
	const key = "mariposa/leader/web"
	var rec leadertest.Recorder
	a := startContender(t, "a", cfgFor(c, key, live["a"]), &rec, nil)
	ta := a.waitTerm(t, 20*time.Second)
	if ta.Key != key || ta.Session == "" || ta.Index == 0 || ta.LockIndex == 0 {
		t.Fatalf("term %+v", ta)
	}
	b := startContender(t, "b", cfgFor(c, key, live["b"]), &rec, nil)

	// b waits: it has a session of its own, and Consul says a leads.
	if !consultest.WaitFor(10*time.Second, func() bool {
		ss, _, err := c.Session().List(nil)
		return err == nil && len(ss) == 2
	}) {
		t.Fatal("b did not create its session")
	}
	h, err := Lookup(context.Background(), c, key)
	if err != nil || h.Session != ta.Session || string(h.Value) != "a" || h.Index != ta.Index || h.Node == "" {
		t.Fatalf("Lookup = %+v, %v; want a's session %s", h, err, ta.Session)
	}
	if b.term() != nil {
		t.Fatal("b leads while a holds the lock")
	}

	// a stops gracefully: it releases, b takes over without lock delay.
	t0 := time.Now()
	a.stop(t)
	tb := b.waitTerm(t, 10*time.Second)
	t.Logf("graceful failover: a's Run returned and b leads %v after a's cancel", time.Since(t0))
	if ra := a.records(); len(ra) != 1 || !errors.Is(ra[0].err, ErrStopped) {
		t.Fatalf("a's terms %v, want one ended by ErrStopped", ra)
	}
	if tb.Session == ta.Session || tb.Index <= ta.Index {
		t.Fatalf("b's term %+v after a's %+v", tb, ta)
	}
	if se, _, err := c.Session().Info(ta.Session, nil); err != nil || se != nil {
		t.Fatalf("a's session still exists after Run returned: %+v %v", se, err)
	}
	h, err = Lookup(context.Background(), c, key)
	if err != nil || h.Session != tb.Session || string(h.Value) != "b" {
		t.Fatalf("Lookup after failover = %+v, %v", h, err)
	}
	b.stop(t)
	if h, _ := Lookup(context.Background(), c, key); h.Session != "" {
		t.Fatalf("lock still held after both stopped: %+v", h)
	}
	if err := leadertest.CheckNoOverlap(rec.Intervals()); err != nil {
		t.Fatal(err)
	}
}

// txnWrite writes data guarded by ops on the lock key, as a leader's child
// would with MARIPOSA_LEADER_SESSION or MARIPOSA_LEADER_INDEX.
func txnWrite(t *testing.T, c *api.Client, guard *api.KVTxnOp, value string) bool {
	t.Helper()
	ok, resp, _, err := c.Txn().Txn(api.TxnOps{
		{KV: guard},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "web/data", Value: []byte(value)}},
	}, nil)
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	if !ok && len(resp.Errors) == 0 {
		t.Fatal("txn failed without errors")
	}
	return ok
}

func TestFencing(t *testing.T) {
	_, c, live := devSetup(t)
	const key = "mariposa/leader/web"
	var rec leadertest.Recorder
	a := startContender(t, "a", cfgFor(c, key, live["a"]), &rec, nil)
	ta := a.waitTerm(t, 20*time.Second)
	bySession := &api.KVTxnOp{Verb: api.KVCheckSession, Key: key, Session: ta.Session}
	byIndex := &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: ta.Index}
	if !txnWrite(t, c, bySession, "a1") || !txnWrite(t, c, byIndex, "a2") {
		t.Fatal("the leader's guarded writes failed")
	}

	b := startContender(t, "b", cfgFor(c, key, live["b"]), &rec, nil)
	a.stop(t)
	tb := b.waitTerm(t, 10*time.Second)
	if txnWrite(t, c, bySession, "a3") || txnWrite(t, c, byIndex, "a4") {
		t.Fatal("a write guarded by the old term succeeded after leadership moved")
	}
	if !txnWrite(t, c, &api.KVTxnOp{Verb: api.KVCheckSession, Key: key, Session: tb.Session}, "b1") ||
		!txnWrite(t, c, &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: tb.Index}, "b2") {
		t.Fatal("the new leader's guarded writes failed")
	}
	if p, _, err := c.KV().Get("web/data", nil); err != nil || string(p.Value) != "b2" {
		t.Fatalf("web/data = %v, %v", p, err)
	}
	if tb.Index <= ta.Index {
		t.Fatalf("fencing token did not grow: %d then %d", ta.Index, tb.Index)
	}
}

// faultEnv is what a fault injected into a single leader can use.
type faultEnv struct {
	c    *api.Client
	live *consultest.Liveness // the leader's liveness check
	a    *contender           // the leader
	term *Term
}

// invalidatedAndBack checks that after fault() the term is lost promptly,
// and that the elector leads again with a new session and a larger fencing
// token once restore() ran.
func invalidatedAndBack(t *testing.T, name string, fault, restore func(faultEnv)) {
	_, c, live := devSetup(t)
	key := "mariposa/leader/" + name
	var rec leadertest.Recorder
	a := startContender(t, "a", cfgFor(c, key, live["a"]), &rec, nil)
	t1 := a.waitTerm(t, 20*time.Second)
	env := faultEnv{c: c, live: live["a"], a: a, term: t1}
	t0 := time.Now()
	fault(env)
	waitClosed(t, t1.Expired(), 5*time.Second, "Expired after "+name)
	t.Logf("%s: term lost %v after the fault: %v; deadline in %v", name, time.Since(t0), t1.Err(),
		t1.Deadline().Sub(a.e.now()))
	if !errors.Is(t1.Err(), ErrLost) || t1.Deadline().IsZero() {
		t.Fatalf("Err %v, Deadline %v", t1.Err(), t1.Deadline())
	}
	restore(env)
	var t2 *Term
	if !consultest.WaitFor(30*time.Second, func() bool { t2 = a.term(); return t2 != nil && t2 != t1 }) {
		t.Fatal("no new term after the session was invalidated")
	}
	t.Logf("%s: leader again %v after the fault", name, time.Since(t0))
	if t2.Session == t1.Session || t2.Index <= t1.Index {
		t.Fatalf("new term reuses the lost one: %+v after %+v", t2, t1)
	}
	if se, _, _ := c.Session().Info(t1.Session, nil); se != nil {
		t.Fatalf("lost session %s still exists", t1.Session)
	}
	if err := leadertest.CheckNoOverlap(rec.Intervals()); err != nil {
		t.Fatal(err)
	}
}

func TestSessionDestroyedOutside(t *testing.T) {
	invalidatedAndBack(t, "destroy", func(f faultEnv) {
		if _, err := f.c.Session().Destroy(f.term.Session, nil); err != nil {
			t.Fatal(err)
		}
	}, func(faultEnv) {})
}

func TestLivenessCheckCritical(t *testing.T) {
	invalidatedAndBack(t, "critical", func(f faultEnv) {
		f.live.Paused.Store(true)
		if err := f.c.Agent().UpdateTTL(f.live.CheckID, "fault injected", api.HealthCritical); err != nil {
			t.Fatal(err)
		}
	}, func(f faultEnv) { f.live.Paused.Store(false) })
}

// TestClockJump simulates a process frozen (SIGSTOP, VM pause) while leader:
// on resume its monotonic clock has jumped, and the term ends at once,
// whatever Consul says. The session was still valid, so it is released once
// onTerm returned and the elector leads again with a new session.
func TestClockJump(t *testing.T) {
	invalidatedAndBack(t, "jump", func(f faultEnv) {
		f.a.clock.Jump(time.Hour)
	}, func(faultEnv) {})
}
