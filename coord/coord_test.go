package coord

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/supervisor"
)

func newSession(t *testing.T, c *api.Client) string {
	t.Helper()
	id, _, err := c.Session().Create(&api.SessionEntry{Name: "test", TTL: "60s", Behavior: api.SessionBehaviorDelete, Checks: []string{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func holders(t *testing.T, c *api.Client, prefix string) int {
	t.Helper()
	p, _, err := c.KV().Get(prefix+"/.lock", &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		return 0
	}
	var l struct{ Holders map[string]bool }
	if err := json.Unmarshal(p.Value, &l); err != nil {
		t.Fatal(err)
	}
	return len(l.Holders)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !consultest.WaitFor(15*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Six contenders, each with its own session, limit 2: never more than two
// hold a token at once, and every one gets one.
func TestGateLimit(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	g := New(c, consultest.Logger(t, "coord"))
	var cur, most, done atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		sess := newSession(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := g.Acquire(context.Background(), supervisor.ReloadRequest{Service: "web", Unit: "web", Session: sess, Hash: "h1", Limit: 2})
			if err != nil {
				t.Errorf("contender %d: %v", i, err)
				return
			}
			n := cur.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(150 * time.Millisecond) // holding the token
			cur.Add(-1)
			release()
			done.Add(1)
		}()
	}
	wg.Wait()
	if most.Load() != 2 || done.Load() != 6 {
		t.Errorf("at most %d held at once (want 2), %d of 6 done", most.Load(), done.Load())
	}
	waitUntil(t, "the semaphore gone once unused", func() bool {
		ps, _, _ := c.KV().List(Prefix("web", "h1"), nil)
		return len(ps) == 0
	})
}

// Two instances of one node share its session, so they share a contender
// key: the gate lets them hold one at a time, even with a limit of 2.
func TestGateSerializesOneSession(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	g := New(c, consultest.Logger(t, "coord"))
	sess := newSession(t, c)
	req := supervisor.ReloadRequest{Service: "web", Unit: "web", Session: sess, Hash: "h1", Limit: 2}
	r1, err := g.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		req.Slot = &supervisor.SlotInfo{Unit: "web", Index: 1}
		r2, err := g.Acquire(context.Background(), req)
		if err != nil {
			t.Error(err)
		}
		got <- r2
	}()
	select {
	case <-got:
		t.Fatal("a second instance with the same session got a token while the first held one")
	case <-time.After(500 * time.Millisecond):
	}
	if n := holders(t, c, Prefix("web", "h1")); n != 1 {
		t.Errorf("%d holders", n)
	}
	r1()
	r1() // twice is fine
	var r2 func()
	select {
	case r2 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the second instance never got its token")
	}
	if n := holders(t, c, Prefix("web", "h1")); n != 1 {
		t.Errorf("%d holders", n)
	}
	r2()
	if n := holders(t, c, Prefix("web", "h1")); n != 0 {
		t.Errorf("%d holders after both released", n)
	}
}

// A token whose session ends is given back by the gate itself: the next
// contender gets it, and the one after it on the lost session's key may
// contend again.
func TestGateReleasesLostToken(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	g := New(c, consultest.Logger(t, "coord"))
	s1, s2 := newSession(t, c), newSession(t, c)
	_, err := g.Acquire(context.Background(), supervisor.ReloadRequest{Service: "web", Unit: "web", Session: s1, Hash: "h", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := g.Acquire(context.Background(), supervisor.ReloadRequest{Service: "web", Unit: "web", Session: s2, Hash: "h", Limit: 1})
		got <- err
	}()
	if _, err := c.Session().Destroy(s1, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the token of a lost session was never given back")
	}
	waitUntil(t, "the lost session's turn given up", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, busy := g.busy[[2]string{Prefix("web", "h"), s1}]
		return !busy
	})
}

// A request cancelled while it waits leaves nothing behind: no contender
// key, no turn held.
func TestGateCancelWhileWaiting(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	g := New(c, consultest.Logger(t, "coord"))
	s1, s2 := newSession(t, c), newSession(t, c)
	r1, err := g.Acquire(context.Background(), supervisor.ReloadRequest{Service: "web", Unit: "web", Session: s1, Hash: "h", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := g.Acquire(ctx, supervisor.ReloadRequest{Service: "web", Unit: "web", Session: s2, Hash: "h", Limit: 1})
		got <- err
	}()
	waitUntil(t, "the second contender's key", func() bool {
		p, _, _ := c.KV().Get(Prefix("web", "h")+"/"+s2, nil)
		return p != nil
	})
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a cancelled request kept waiting")
	}
	if p, _, _ := c.KV().Get(Prefix("web", "h")+"/"+s2, nil); p != nil {
		t.Errorf("the cancelled contender's key stayed: %s", p.Key)
	}
	r1()
	// Without a session, the semaphore makes its own.
	r, err := g.Acquire(context.Background(), supervisor.ReloadRequest{Service: "web", Unit: "web", Hash: "h", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	r()
	if _, err := g.Acquire(context.Background(), supervisor.ReloadRequest{Service: "web"}); err == nil {
		t.Error("a request without unit or hash was accepted")
	}
}
