package lease

import (
	"context"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestStandbyWaitsWithoutConsistentRead: a contender looks at a held key
// with a consistent read, then waits for it with blocking queries that
// are not consistent (a consistent one is answered only after the servers
// confirm their leader, on the path of every handover), and takes the key
// once it is released.
func TestStandbyWaitsWithoutConsistentRead(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	const key = "mariposa/leader/standby-read"
	holder, _, err := c.Session().Create(&api.SessionEntry{Name: "holder", LockDelay: time.Millisecond, Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Session().Destroy(holder, nil) })
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Value: []byte("holder"), Session: holder}, nil); err != nil || !ok {
		t.Fatalf("the holder's acquire: %v %v", ok, err)
	}

	type read struct{ blocking, consistent bool }
	var mu sync.Mutex
	var reads []read
	lc := proxiedClient(t, agent.HTTPAddr(), func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/kv/"+key {
			q := r.URL.Query()
			mu.Lock()
			reads = append(reads, read{blocking: q.Get("index") != "", consistent: q.Has("consistent")})
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	})
	blocked := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range reads {
			if r.blocking {
				n++
			}
		}
		return n
	}
	ls := New(Config{Client: lc, LockDelay: time.Second, Log: consultest.Logger(t, "standby")})
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	var term *Term
	go func() {
		var err error
		term, err = ls.Acquire(ctx, Hold{Key: key, Value: []byte("standby")})
		got <- err
	}()
	if !consultest.WaitFor(20*time.Second, func() bool { return blocked() > 0 }) {
		t.Fatal("the contender never waited on the key with a blocking query")
	}
	if _, _, err := c.KV().Release(&api.KVPair{Key: key, Session: holder}, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	defer func() { _ = term.Release() }()
	mu.Lock()
	defer mu.Unlock()
	var desc []string
	for _, r := range reads {
		switch {
		case r.blocking && r.consistent:
			desc = append(desc, "consistent blocking")
		case r.blocking:
			desc = append(desc, "blocking")
		case r.consistent:
			desc = append(desc, "consistent")
		default:
			desc = append(desc, "plain")
		}
	}
	if len(reads) == 0 || !reads[0].consistent || reads[0].blocking {
		t.Errorf("reads %v: want a consistent look first", desc)
	}
	for _, r := range reads {
		if r.blocking && r.consistent {
			t.Errorf("reads %v: a consistent blocking query", strings.Join(desc, ", "))
			break
		}
	}
}
