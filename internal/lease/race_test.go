package lease

import (
	"context"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestAcquireLostRaceWatchesWinner: a contender whose acquire is refused
// because another session took the key between its read and its lock (two
// standbys started together) watches the winner's hold at once, so a quick
// release by the winner is not missed. It used to wait its retry first
// (lock delay / 10, up to 500 ms: here 500 ms) as if the refusal were a
// lock delay, blind to the key meanwhile.
func TestAcquireLostRaceWatchesWinner(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	const key = "mariposa/leader/race"
	winner, _, err := c.Session().Create(&api.SessionEntry{Name: "winner", Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Session().Destroy(winner, nil) })

	// In front of the loser's agent: its first lock transaction is held
	// until the winner has taken the key; the winner lets go 50 ms after
	// the loser's refusal.
	var refusedAt, releasedAt atomic.Int64
	var txns atomic.Int32
	lc := proxiedClient(t, agent.HTTPAddr(), func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != "/v1/txn" || txns.Add(1) != 1 {
			rp.ServeHTTP(w, r)
			return
		}
		if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Value: []byte("winner"), Session: winner}, nil); err != nil || !ok {
			t.Errorf("the winner's acquire: %v %v", ok, err)
		}
		rec := statusRecorder{ResponseWriter: w}
		rp.ServeHTTP(&rec, r)
		if rec.code != http.StatusConflict {
			t.Errorf("the loser's first lock answered %d, want 409 (refused)", rec.code)
		}
		refusedAt.Store(time.Now().UnixNano())
		time.AfterFunc(50*time.Millisecond, func() {
			releasedAt.Store(time.Now().UnixNano())
			if _, _, err := c.KV().Release(&api.KVPair{Key: key, Session: winner}, nil); err != nil {
				t.Errorf("the winner's release: %v", err)
			}
		})
	})
	// A 15 s lock delay makes the retry 500 ms.
	ls := New(Config{Client: lc, LockDelay: 15 * time.Second, Log: consultest.Logger(t, "loser")})
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	term, err := ls.Acquire(ctx, Hold{Key: key, Value: []byte("loser")})
	if err != nil {
		t.Fatal(err)
	}
	got := time.Now()
	defer func() { _ = term.Release() }()
	if refusedAt.Load() == 0 || releasedAt.Load() == 0 {
		t.Fatal("the race did not happen: no refused lock")
	}
	// Within 250 ms of the release (half the retry): it watched the key.
	if after := got.Sub(time.Unix(0, releasedAt.Load())); after > 250*time.Millisecond {
		t.Fatalf("acquired %v after the winner's release (%v after the refusal); want it watched, not waited out",
			after.Round(time.Millisecond), got.Sub(time.Unix(0, refusedAt.Load())).Round(time.Millisecond))
	}
}

// statusRecorder records the status code of a proxied answer.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }

// TestAcquireDuringLockDelayWaits: a key freed by an invalidated session is
// refused for the lock delay; a contender waits it out with its retry
// between attempts (lock delay / 10) instead of asking in a loop.
func TestAcquireDuringLockDelayWaits(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	const key = "mariposa/leader/delay"
	const delay = time.Second
	old, _, err := c.Session().Create(&api.SessionEntry{Name: "old", LockDelay: delay, Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Session: old}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	// Destroying the holding session invalidates it: the lock delay starts.
	if _, err := c.Session().Destroy(old, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	var txns atomic.Int32
	lc := proxiedClient(t, agent.HTTPAddr(), func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/txn" {
			txns.Add(1)
		}
		rp.ServeHTTP(w, r)
	})
	ls := New(Config{Client: lc, LockDelay: delay, Log: consultest.Logger(t, "next")})
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	term, err := ls.Acquire(ctx, Hold{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = term.Release() }()
	took, n := time.Since(start), txns.Load()
	if took < delay*9/10 {
		t.Fatalf("acquired %v after the invalidation, inside the lock delay of %v", took, delay)
	}
	// One attempt per retry (delay/10) over the delay, and the one straight
	// after the first refusal: about 12. A loop would send hundreds.
	const most = 10 + 5
	if n > most {
		t.Fatalf("%d lock transactions over %v of lock delay; want at most %d", n, took.Round(time.Millisecond), most)
	}
	t.Logf("%d lock transactions over %v", n, took.Round(time.Millisecond))
}
