package lease

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

func nodeName(t *testing.T, c *api.Client) string {
	t.Helper()
	n, err := c.Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// holderOf reads who holds node's lock.
func holderOf(t *testing.T, c *api.Client, node string) (string, NodeInfo) {
	t.Helper()
	p, _, err := c.KV().Get(NodeLockKey(node), &api.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil {
		t.Fatalf("node lock key: %v %v", p, err)
	}
	var info NodeInfo
	if err := json.Unmarshal(p.Value, &info); err != nil {
		t.Fatalf("node lock value %q: %v", p.Value, err)
	}
	return p.Session, info
}

// TestNodeLockSecondRefused: while one supervisor holds the node lock, a
// second one is refused with an error that names the first, and the first
// keeps it.
func TestNodeLockSecondRefused(t *testing.T) {
	c := dev(t)
	node := nodeName(t, c)
	live := consultest.StartLiveness(t, c, node)
	ctx := context.Background()
	first := NodeInfo{PID: 4242, Hostname: "web-1", Started: time.Now().Add(-time.Hour)}
	l1 := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "first")})
	t.Cleanup(l1.Close)
	if err := WaitNodeLockFree(ctx, c, node, time.Second, nil); err != nil {
		t.Fatalf("free node: %v", err)
	}
	n1, err := l1.AcquireNodeLock(ctx, node, first)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n1.Release() })

	// The read-only check refuses once its wait is over.
	t0 := time.Now()
	err = WaitNodeLockFree(ctx, c, node, 700*time.Millisecond, consultest.Logger(t, "second"))
	var he *HeldError
	if !errors.As(err, &he) || he.Holder == nil || he.Holder.PID != 4242 || he.Session != n1.Session() {
		t.Fatalf("WaitNodeLockFree = %v, want a HeldError naming pid 4242", err)
	}
	if d := time.Since(t0); d < 600*time.Millisecond {
		t.Fatalf("refused after %v, before its wait", d)
	}
	for _, s := range []string{"pid 4242", "host web-1", "node " + node, "since ", "-allow-second-supervisor"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}

	// A second starter that won the read race is refused at acquisition,
	// without waiting, and the first keeps the lock.
	l2 := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "second")})
	t.Cleanup(l2.Close)
	_, err = l2.AcquireNodeLock(ctx, node, NodeInfo{PID: 777, Hostname: "web-1"})
	if !errors.As(err, &he) || he.Holder == nil || he.Holder.PID != 4242 || he.Holder.Node != node {
		t.Fatalf("second AcquireNodeLock = %v, want a HeldError naming pid 4242", err)
	}
	if s, info := holderOf(t, c, node); s != n1.Session() || info.PID != 4242 {
		t.Fatalf("holder now %s %+v", s, info)
	}
	select {
	case <-n1.Lost():
		t.Fatal("the first lost its node lock")
	default:
	}
}

// TestNodeLockAfterCrash: the holder is killed (SIGKILL: no renewal, no
// release, its liveness check no longer heartbeated). A new supervisor that
// waits without heartbeating the check sees the lock freed once the check's
// TTL ran out, registers, and takes the lock once the lock delay passed.
func TestNodeLockAfterCrash(t *testing.T) {
	c := dev(t)
	node := nodeName(t, c)
	live := consultest.StartLiveness(t, c, node)
	ctx := context.Background()
	l1 := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "old")})
	n1, err := l1.AcquireNodeLock(ctx, node, NodeInfo{PID: 4242, Hostname: "web-1", Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	old := n1.Session()

	// SIGKILL.
	live.Paused.Store(true)
	n1.cancel()
	<-n1.done
	l1.abandon()
	t0 := time.Now()

	// The new process: wait (read only), then register and heartbeat the
	// liveness check, then take the lock.
	wait := NodeLockWait(3*time.Second, DefaultLockDelay)
	if err := WaitNodeLockFree(ctx, c, node, wait, consultest.Logger(t, "new")); err != nil {
		t.Fatalf("WaitNodeLockFree after the holder died: %v", err)
	}
	freed := time.Since(t0)
	if err := live.Register(); err != nil {
		t.Fatal(err)
	}
	live.Paused.Store(false)
	l2 := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "new")})
	t.Cleanup(l2.Close)
	n2, err := l2.AcquireNodeLock(ctx, node, NodeInfo{PID: 5151, Hostname: "web-1", Started: time.Now()})
	if err != nil {
		t.Fatalf("AcquireNodeLock after the holder died: %v", err)
	}
	t.Cleanup(func() { _ = n2.Release() })
	t.Logf("crashed holder: lock free after %v, held by the new one after %v (wait bound %v)", freed, time.Since(t0), wait)
	if s, info := holderOf(t, c, node); s != n2.Session() || s == old || info.PID != 5151 {
		t.Fatalf("holder %s %+v", s, info)
	}
	if se, _, _ := c.Session().Info(old, nil); se != nil {
		t.Fatal("the dead holder's session still exists")
	}
}

// TestNodeLockReleaseThenNext: a released node lock is free at once (no
// lock delay), and the NodeLock does not take it back.
func TestNodeLockReleaseThenNext(t *testing.T) {
	c := dev(t)
	node := nodeName(t, c)
	live := consultest.StartLiveness(t, c, node)
	ctx := context.Background()
	cfg := Config{Client: c, Checks: []string{live.CheckID}, LockDelay: 5 * time.Second}
	cfg.Log = consultest.Logger(t, "first")
	l1 := New(cfg)
	t.Cleanup(l1.Close)
	n1, err := l1.AcquireNodeLock(ctx, node, NodeInfo{PID: 1, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Log = consultest.Logger(t, "second")
	l2 := New(cfg)
	t.Cleanup(l2.Close)
	// Make the second lease's session first, so the timing below is the
	// lock's alone.
	warm, err := l2.Acquire(ctx, Hold{Key: "mariposa/warm"})
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Release()

	t0 := time.Now()
	if err := n1.Release(); err != nil {
		t.Fatal(err)
	}
	if err := WaitNodeLockFree(ctx, c, node, 0, nil); err != nil {
		t.Fatalf("after release: %v", err)
	}
	n2, err := l2.AcquireNodeLock(ctx, node, NodeInfo{PID: 2, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Release()
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("next holder after %v: the release left a lock delay?", d)
	}
	if s, info := holderOf(t, c, node); s != n2.Session() || info.PID != 2 {
		t.Fatalf("holder %s %+v", s, info)
	}
}

// TestNodeLockRetaken: a node lock whose session is lost is taken again
// with a new session; Lost closes only when another supervisor holds it.
func TestNodeLockRetaken(t *testing.T) {
	c := dev(t)
	node := nodeName(t, c)
	live := consultest.StartLiveness(t, c, node)
	ctx := context.Background()
	l1 := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "first")})
	t.Cleanup(l1.Close)
	n1, err := l1.AcquireNodeLock(ctx, node, NodeInfo{PID: 1, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	s1 := n1.Session()
	if _, err := c.Session().Destroy(s1, nil); err != nil {
		t.Fatal(err)
	}
	var s2 string
	ok := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s2 = n1.Session(); s2 != "" && s2 != s1 {
			ok = true
			break
		}
	}
	if !ok {
		t.Fatal("the node lock was not taken again with a new session")
	}
	select {
	case <-n1.Lost():
		t.Fatalf("Lost closed: %v", n1.Err())
	default:
	}

	// Another supervisor takes it (while this one could not, say): Lost
	// closes, naming it.
	l2 := New(Config{Client: c, Checks: []string{live.CheckID}, Log: consultest.Logger(t, "other")})
	t.Cleanup(l2.Close)
	other, err := l2.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Session().Destroy(s2, nil); err != nil {
		t.Fatal(err)
	}
	val, _ := json.Marshal(NodeInfo{PID: 99, Hostname: "intruder"})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ok, _, err := c.KV().Acquire(&api.KVPair{Key: NodeLockKey(node), Value: val, Session: other.id}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other session could not take the lock")
		}
	}
	waitClosed(t, n1.Lost(), 10*time.Second, "Lost after another supervisor took the node lock")
	var he *HeldError
	if !errors.As(n1.Err(), &he) || he.Holder == nil || he.Holder.PID != 99 {
		t.Fatalf("Err = %v", n1.Err())
	}
	_ = n1.Release()
	if s, _ := holderOf(t, c, node); s != other.id {
		t.Fatal("Release took the lock from the other supervisor")
	}
}

func TestSinceText(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	if s := sinceText(time.Date(2026, 3, 4, 7, 1, 18, 0, time.UTC), now); s != "07:01:18" {
		t.Fatal(s)
	}
	if s := sinceText(time.Date(2026, 3, 3, 7, 1, 18, 0, time.UTC), now); s != "2026-03-03 07:01:18" {
		t.Fatal(s)
	}
	e := &HeldError{Node: "web-1", Session: "abc"}
	if !strings.Contains(e.Error(), "session abc") || !strings.Contains(e.Error(), "node web-1") {
		t.Fatal(e.Error())
	}
}
