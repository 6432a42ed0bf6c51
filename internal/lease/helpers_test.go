package lease

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// testLog sends logs to t.Log (level from MARIPOSA_TEST_LOG, default info),
// and drops them once the test is over.
func testLog(t testing.TB, name string) hclog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(w.close)
	level := hclog.LevelFromString(os.Getenv("MARIPOSA_TEST_LOG"))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: w, Level: level, TimeFormat: "15:04:05.000"})
}

type tWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p[:len(p)-1]))
	}
	return len(p), nil
}

func (w *tWriter) close() { w.mu.Lock(); w.done = true; w.mu.Unlock() }

// liveness plays mariposa's liveness check: service "mariposa-<name>" with
// a TTL check (3s) heartbeated every second until paused.
type liveness struct {
	c       *api.Client
	svcID   string
	CheckID string
	paused  atomic.Bool
}

func newLiveness(c *api.Client, name string) *liveness {
	return &liveness{c: c, svcID: "mariposa-" + name, CheckID: "mariposa-" + name + ":mariposa"}
}

func (l *liveness) register() error {
	return l.c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: l.svcID, Name: "mariposa",
		Check: &api.AgentServiceCheck{CheckID: l.CheckID, Name: "mariposa supervisor", TTL: "3s", Status: api.HealthPassing},
	})
}

// heartbeat updates the check every second until the test ends or paused.
func (l *liveness) heartbeat(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sleep(ctx, time.Second) {
			if !l.paused.Load() {
				_ = l.c.Agent().UpdateTTL(l.CheckID, "alive", api.HealthPassing)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func startLiveness(t testing.TB, c *api.Client, name string) *liveness {
	t.Helper()
	l := newLiveness(c, name)
	if err := l.register(); err != nil {
		t.Fatalf("register liveness check: %v", err)
	}
	l.heartbeat(t)
	return l
}

func waitClosed(t testing.TB, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

// dev starts a dev agent and returns a client of it.
func dev(t *testing.T) *api.Client {
	t.Helper()
	return consultest.NewDev(t).Client(t)
}

// abandon stops l's sessions' loops without releasing or destroying
// anything, as a SIGKILL would: the sessions live on in Consul until
// Consul invalidates them.
func (l *Lease) abandon() {
	for _, s := range l.liveSessions() {
		s.stop()
	}
}
