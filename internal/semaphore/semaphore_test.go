package semaphore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// contender is what the tests drive: this package's Semaphore or, as the
// control and as an older node, api.Semaphore.
type contender interface {
	Acquire(stop <-chan struct{}) (<-chan struct{}, error)
	Release() error
}

func newSession(t *testing.T, c *api.Client) string {
	t.Helper()
	id, _, err := c.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: api.SessionBehaviorRelease, LockDelay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newFIFO(t *testing.T, c *api.Client, prefix string, limit int, session string) contender {
	t.Helper()
	s, err := New(c, Options{Prefix: prefix, Limit: limit, Session: session, StaleAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newFIFOPatient is newFIFO with blocking queries as long as the
// defaults: no timeout wakes a waiter while a test counts wake-ups.
func newFIFOPatient(t *testing.T, c *api.Client, prefix string, limit int, session string) contender {
	t.Helper()
	s, err := New(c, Options{Prefix: prefix, Limit: limit, Session: session, StaleAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newOld(t *testing.T, c *api.Client, prefix string, limit int, session string) contender {
	t.Helper()
	s, err := c.SemaphoreOpts(&api.SemaphoreOptions{Prefix: prefix, Limit: limit, Session: session, SemaphoreWaitTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// counter is a front for the agent that counts what the waiters ask of
// Consul: reads answered, failed writes (a CAS answered false, a txn
// rolled back), and the blocking reads in flight.
type counter struct {
	reads, failed, inflight, done atomic.Int64
}

func (k *counter) client(t *testing.T, target string) *api.Client {
	addr := consultest.AgentProxy(t, target, func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			blocking := r.URL.Query().Get("index") != ""
			if blocking {
				k.inflight.Add(1)
			}
			rp.ServeHTTP(w, r)
			if blocking {
				k.inflight.Add(-1)
			}
			k.reads.Add(1)
			k.done.Add(1)
			return
		}
		rec := &recorder{ResponseWriter: w, code: 200}
		rp.ServeHTTP(rec, r)
		if rec.code == http.StatusConflict || strings.TrimSpace(rec.body.String()) == "false" {
			k.failed.Add(1)
		}
		k.done.Add(1)
	})
	cfg := api.DefaultConfig()
	cfg.Address = addr
	cfg.Transport = &http.Transport{MaxIdleConnsPerHost: 64}
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type recorder struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (r *recorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }
func (r *recorder) Write(p []byte) (int, error) {
	if r.body.Len() < 16 {
		r.body.Write(p[:min(len(p), 16)])
	}
	return r.ResponseWriter.Write(p)
}
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// settled waits until n blocking reads are in flight and nothing else
// went through the front for a while.
func (k *counter) settled(t *testing.T, n int64, what string) {
	t.Helper()
	last, since := k.done.Load(), time.Now()
	ok := consultest.WaitFor(60*time.Second, func() bool {
		if d := k.done.Load(); d != last || k.inflight.Load() != n {
			last, since = d, time.Now()
			return false
		}
		return time.Since(since) > 400*time.Millisecond
	})
	if !ok {
		t.Fatalf("%s: %d blocking reads in flight, want %d", what, k.inflight.Load(), n)
	}
}

// wakeups measures one release with n waiters behind one holder: the
// reads answered and the failed writes of the waiters between the
// release and the moment the next holder and the n-1 waiters left block
// again.
func wakeups(t *testing.T, mk func(*testing.T, *api.Client, string, int, string) contender, n int) (reads, failed int64) {
	agent := consultest.NewDev(t)
	direct := agent.Client(t)
	var k counter
	waitersClient := k.client(t, agent.HTTPAddr())
	prefix := "sem/" + t.Name()
	holder := mk(t, direct, prefix, 1, newSession(t, direct))
	if _, err := holder.Acquire(nil); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, n)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	for i := range n {
		c := mk(t, waitersClient, prefix, 1, newSession(t, direct))
		go func() {
			if lost, err := c.Acquire(stop); err == nil && lost != nil {
				got <- i
			}
		}()
	}
	// Every waiter blocks (on the prefix, or on its predecessor's key).
	k.settled(t, int64(n), "before the release")
	r0, f0 := k.reads.Load(), k.failed.Load()
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no waiter took the token given back")
	}
	// The new holder's monitor and the n-1 waiters left block again.
	k.settled(t, int64(n), "after the release")
	return k.reads.Load() - r0, k.failed.Load() - f0
}

// TestReleaseWakesOneWaiter: with 10 waiters, a release costs a few reads
// and no failed CAS, where api.Semaphore (the control, which every waiter
// watches the prefix of) costs a read per waiter and failed CASes.
func TestReleaseWakesOneWaiter(t *testing.T) {
	consultest.RequireBinary(t)
	const n = 10
	t.Run("queue", func(t *testing.T) {
		reads, failed := wakeups(t, newFIFOPatient, n)
		t.Logf("one release, %d waiters: %d reads, %d failed writes", n, reads, failed)
		// The first waiter's read and CAS, its monitor's first read, the
		// second waiter's wake-up and read.
		if reads > 6 || failed > 1 {
			t.Errorf("one release with %d waiters: %d reads, %d failed writes; want <= 6 and <= 1", n, reads, failed)
		}
	})
	t.Run("api.Semaphore (control)", func(t *testing.T) {
		reads, failed := wakeups(t, newOld, n)
		t.Logf("one release, %d waiters: %d reads, %d failed writes", n, reads, failed)
		if reads < n {
			t.Errorf("the control did not herd: %d reads for %d waiters (does the test count?)", reads, n)
		}
	})
}

// TestNeverMoreThanLimit: contenders of both kinds (an older node's
// api.Semaphore among this package's) take and give back the tokens of
// one prefix; never more than limit hold at once and every one gets its
// turn.
func TestNeverMoreThanLimit(t *testing.T) {
	consultest.RequireBinary(t)
	c := consultest.NewDev(t).Client(t)
	const limit, each = 2, 3
	var holding, most atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 8 {
		mk := newFIFO
		if i%3 == 2 {
			mk = newOld
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess := newSession(t, c)
			for range each {
				s := mk(t, c, "sem/limit", limit, sess)
				lost, err := s.Acquire(nil)
				if err != nil || lost == nil {
					errs <- fmt.Errorf("contender %d: %v", i, err)
					return
				}
				h := holding.Add(1)
				for {
					m := most.Load()
					if h <= m || most.CompareAndSwap(m, h) {
						break
					}
				}
				// Hold the token a while (not a wait for a condition), so
				// that holders overlap if the limit lets them.
				time.Sleep(20 * time.Millisecond)
				holding.Add(-1)
				if err := s.Release(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := most.Load(); m > limit {
		t.Errorf("%d held at once, limit %d", m, limit)
	}
	pairs, _, _ := c.KV().List("sem/limit", nil)
	for _, p := range pairs {
		if !strings.HasSuffix(p.Key, "/.lock") {
			t.Errorf("contender key left: %s", p.Key)
		}
	}
}

// TestHolderDies: a holder's session ends; its token comes back by the
// invalidation alone (the next waiter takes it) and its lost channel
// closes.
func TestHolderDies(t *testing.T) {
	consultest.RequireBinary(t)
	c := consultest.NewDev(t).Client(t)
	s1 := newSession(t, c)
	a := newFIFO(t, c, "sem/dies", 1, s1)
	lost, err := a.Acquire(nil)
	if err != nil || lost == nil {
		t.Fatal(err)
	}
	b := newFIFO(t, c, "sem/dies", 1, newSession(t, c))
	got := make(chan struct{})
	go func() {
		if l, err := b.Acquire(nil); err == nil && l != nil {
			close(got)
		}
	}()
	if !consultest.WaitFor(30*time.Second, func() bool {
		pairs, _, _ := c.KV().List("sem/dies", nil)
		return len(pairs) == 3
	}) {
		t.Fatal("the waiter's contender key never came")
	}
	if _, err := c.Session().Destroy(s1, nil); err != nil {
		t.Fatal(err)
	}
	for what, ch := range map[string]<-chan struct{}{"the dead holder's lost": lost, "the waiter's token": got} {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not within 30s", what)
		}
	}
}

// TestStaleWaiterSkipped: a waiter ahead that no longer acts (its key
// left behind, its session alive; this package's or an older node's)
// holds the queue up for StaleAfter only.
func TestStaleWaiterSkipped(t *testing.T) {
	consultest.RequireBinary(t)
	c := consultest.NewDev(t).Client(t)
	for name, flags := range map[string]uint64{"queued": FlagWaiting, "api.Semaphore": api.SemaphoreFlagValue} {
		t.Run(name, func(t *testing.T) {
			prefix := "sem/stale/" + name
			stale := newSession(t, c)
			if ok, _, err := c.KV().Acquire(&api.KVPair{Key: prefix + "/" + stale, Flags: flags, Session: stale}, nil); err != nil || !ok {
				t.Fatal(ok, err)
			}
			b := newFIFO(t, c, prefix, 1, newSession(t, c))
			got := make(chan struct{})
			go func() {
				if l, err := b.Acquire(nil); err == nil && l != nil {
					close(got)
				}
			}()
			select {
			case <-got:
			case <-time.After(30 * time.Second):
				t.Fatal("the waiter behind a stale one never got the free token")
			}
		})
	}
}

func newSlot(t *testing.T, c *api.Client, prefix string, limit int, session, name string) *Semaphore {
	t.Helper()
	s, err := New(c, Options{Prefix: prefix, Limit: limit, Session: session, Name: name, StaleAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSlotsOfOneSession: contenders of one session named per slot each
// hold a token (a node updates several slots at once), count one each
// toward the limit, and all come back when the session ends.
func TestSlotsOfOneSession(t *testing.T) {
	consultest.RequireBinary(t)
	c := consultest.NewDev(t).Client(t)
	const prefix = "sem/slots"
	a, b := newSession(t, c), newSession(t, c)
	for _, k := range []string{"1", "2"} {
		done := make(chan error, 1)
		go func() {
			_, err := newSlot(t, c, prefix, 2, a, a+"/"+k).Acquire(nil)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("slot %s of a session holding a token got none of the free one", k)
		}
	}
	got := make(chan string, 3)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	for _, w := range []struct{ sess, name string }{{a, a + "/3"}, {b, b + "/1"}, {b, b + "/2"}} {
		go func() {
			if lost, err := newSlot(t, c, prefix, 2, w.sess, w.name).Acquire(stop); err == nil && lost != nil {
				got <- w.name
			}
		}()
	}
	// The three wait: their keys are there, and nobody got a third token.
	if !consultest.WaitFor(30*time.Second, func() bool {
		keys, _, _ := c.KV().Keys(prefix+"/", "", nil)
		return len(keys) == 6 // .lock, 2 holders, 3 waiters
	}) {
		t.Fatal("the waiters' keys did not appear")
	}
	select {
	case n := <-got:
		t.Fatalf("%s took a third token, limit 2", n)
	case <-time.After(time.Second): // a wait for nothing to happen
	}
	// Session a ends: both its tokens come back, and b's two slots take them.
	if _, err := c.Session().Destroy(a, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case n := <-got:
			if !strings.HasPrefix(n, b+"/") {
				t.Fatalf("%s took a token after its session ended", n)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the ended session's tokens did not come back")
		}
	}
}

// TestNeverMoreThanLimitSlots: nodes with two slots each (contenders
// named <session>/<slot>), and an older node (api.Semaphore) among them,
// take and give back tokens: never more than limit at once.
func TestNeverMoreThanLimitSlots(t *testing.T) {
	consultest.RequireBinary(t)
	c := consultest.NewDev(t).Client(t)
	const limit, each = 3, 3
	var holding, most atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	sessions := []string{newSession(t, c), newSession(t, c), newSession(t, c)}
	for i := range 7 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				var s contender
				if i == 6 {
					s = newOld(t, c, "sem/slotlimit", limit, newSession(t, c))
				} else {
					sess := sessions[i%3]
					s = newSlot(t, c, "sem/slotlimit", limit, sess, fmt.Sprintf("%s/%d", sess, i))
				}
				lost, err := s.Acquire(nil)
				// The older node stands aside (a limit conflict) while a
				// session holds several tokens, and tries again later.
				for tries := 0; i == 6 && err != nil && strings.Contains(err.Error(), "conflict") && tries < 2000; tries++ {
					time.Sleep(5 * time.Millisecond) // older mariposa's retry, not a wait for a condition
					s = newOld(t, c, "sem/slotlimit", limit, newSession(t, c))
					lost, err = s.Acquire(nil)
				}
				if err != nil || lost == nil {
					errs <- fmt.Errorf("contender %d: %v", i, err)
					return
				}
				h := holding.Add(1)
				for {
					m := most.Load()
					if h <= m || most.CompareAndSwap(m, h) {
						break
					}
				}
				time.Sleep(20 * time.Millisecond) // hold a while, so that holders overlap
				holding.Add(-1)
				if err := s.Release(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := most.Load(); m > limit {
		t.Errorf("%d held at once, limit %d", m, limit)
	}
}

// TestOlderNodeStandsAside: while a session holds two tokens, .lock's
// Limit reads -limit and an older node (api.Semaphore) does not acquire;
// once one is given back, the next acquisition (another session's, one
// token) writes the limit back and the older node takes the free token.
func TestOlderNodeStandsAside(t *testing.T) {
	consultest.RequireBinary(t)
	c := consultest.NewDev(t).Client(t)
	const prefix = "sem/aside"
	limit := func() int {
		p, _, err := c.KV().Get(prefix+"/.lock", nil)
		if err != nil || p == nil {
			return 0
		}
		var l Lock
		_ = json.Unmarshal(p.Value, &l)
		return l.Limit
	}
	a, b := newSession(t, c), newSession(t, c)
	first := newSlot(t, c, prefix, 3, a, a+"/1")
	if _, err := first.Acquire(nil); err != nil {
		t.Fatal(err)
	}
	if got := limit(); got != 3 {
		t.Fatalf("one token a session: .lock's Limit %d, want 3", got)
	}
	if _, err := newSlot(t, c, prefix, 3, a, a+"/2").Acquire(nil); err != nil {
		t.Fatal(err)
	}
	if got := limit(); got != -3 {
		t.Fatalf("two tokens of one session: .lock's Limit %d, want -3", got)
	}
	if _, err := newOld(t, c, prefix, 3, newSession(t, c)).Acquire(nil); err == nil || !strings.Contains(err.Error(), "conflict") {
		t.Fatalf("an older node acquired beside a session holding two tokens (it counts one): %v", err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := newSlot(t, c, prefix, 3, b, b+"/1").Acquire(nil); err != nil {
		t.Fatal(err)
	}
	if got := limit(); got != 3 {
		t.Fatalf("no session with several tokens: .lock's Limit %d, want 3", got)
	}
	done := make(chan error, 1)
	go func() {
		_, err := newOld(t, c, prefix, 3, newSession(t, c)).Acquire(nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the older node did not take the free token")
	}
}

// TestOlderNodeNotLeftAsideAfterLastRelease: a session held two tokens
// (.lock's Limit -3) and gave both back, and no other new node acquires:
// the release that left no session with several writes the limit back, so
// an older node, the only one left, takes a token. (Before, .lock stayed
// at -3 and the older node stood aside for good: TestNeverMoreThanLimitSlots
// failed now and then with the older contender's "conflict".)
func TestOlderNodeNotLeftAsideAfterLastRelease(t *testing.T) {
	consultest.RequireBinary(t)
	c := consultest.NewDev(t).Client(t)
	const prefix = "sem/lastrelease"
	a := newSession(t, c)
	one, two := newSlot(t, c, prefix, 3, a, a+"/1"), newSlot(t, c, prefix, 3, a, a+"/2")
	for _, s := range []*Semaphore{one, two} {
		if _, err := s.Acquire(nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*Semaphore{one, two} {
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	p, _, err := c.KV().Get(prefix+"/.lock", nil)
	if err != nil || p == nil {
		t.Fatalf(".lock: %v %v", p, err)
	}
	var l Lock
	if err := json.Unmarshal(p.Value, &l); err != nil {
		t.Fatal(err)
	}
	if l.Limit != 3 {
		t.Fatalf("no token held: .lock's Limit %d, want 3", l.Limit)
	}
	done := make(chan error, 1)
	go func() {
		_, err := newOld(t, c, prefix, 3, newSession(t, c)).Acquire(nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the older node, alone, did not take a free token: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the older node did not take the free token")
	}
}

// TestIdenticalLockWriteStillFences: Consul leaves a key's ModifyIndex
// alone when a write changes nothing, so an acquisition whose .lock would
// read exactly as before (a session listed by a token it released takes
// one again) must still move it, or a second acquisition from the same
// read passes its CAS too: two tokens from one. Found by
// TestNeverMoreThanLimitSlots (4 held, limit 3, about once in 50 runs
// under load); here made certain: limit 1, both CASes from one read.
func TestIdenticalLockWriteStillFences(t *testing.T) {
	consultest.RequireBinary(t)
	c := consultest.NewDev(t).Client(t)
	const prefix = "sem/same"
	f, g := newSession(t, c), newSession(t, c)
	first := newSlot(t, c, prefix, 1, f, f+"/a")
	if _, err := first.Acquire(nil); err != nil {
		t.Fatal(err)
	}
	// Released: the key goes, .lock still lists f.
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, other := newSlot(t, c, prefix, 1, f, f+"/b"), newSlot(t, c, prefix, 1, g, g+"/c")
	for _, s := range []*Semaphore{again, other} {
		if ok, _, err := c.KV().Acquire(&api.KVPair{Key: s.key(), Flags: FlagWaiting, Session: s.o.Session}, nil); err != nil || !ok {
			t.Fatalf("contender key %s: %v %v", s.key(), ok, err)
		}
	}
	pairs, _, err := c.KV().List(prefix, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	took := 0
	for _, s := range []*Semaphore{again, other} {
		d, err := Decide(pairs, prefix, s.o.Name, s.o.Session, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.tryAcquire(context.Background(), d) {
			took++
		}
	}
	if took != 1 {
		t.Fatalf("%d acquisitions from one read of one free token, want 1", took)
	}
}
