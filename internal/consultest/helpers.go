package consultest

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// Logger sends logs to t.Log (level from MARIPOSA_TEST_LOG, default info),
// and drops them once the test is over.
func Logger(t testing.TB, name string) hclog.Logger {
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

// Liveness plays mariposa's liveness check: service "mariposa-<name>" with
// a TTL check (3s), heartbeated every second unless Paused.
type Liveness struct {
	c       *api.Client
	svcID   string
	CheckID string
	Paused  atomic.Bool
}

// NewLiveness returns the liveness check of name, not yet registered.
func NewLiveness(c *api.Client, name string) *Liveness {
	return &Liveness{c: c, svcID: "mariposa-" + name, CheckID: "mariposa-" + name + ":mariposa"}
}

// StartLiveness registers the check and heartbeats it until the test ends.
func StartLiveness(t testing.TB, c *api.Client, name string) *Liveness {
	t.Helper()
	l := NewLiveness(c, name)
	if err := l.Register(); err != nil {
		t.Fatalf("register liveness check: %v", err)
	}
	l.Heartbeat(t)
	return l
}

// Register registers the service and its check, passing.
func (l *Liveness) Register() error {
	return l.c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: l.svcID, Name: "mariposa",
		Check: &api.AgentServiceCheck{CheckID: l.CheckID, Name: "mariposa supervisor", TTL: "3s", Status: api.HealthPassing},
	})
}

// Heartbeat updates the check every second until the test ends (not while
// Paused); an agent that restarted without its registrations gets them
// again.
func (l *Liveness) Heartbeat(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if l.Paused.Load() {
				continue
			}
			if err := l.c.Agent().UpdateTTL(l.CheckID, "alive", api.HealthPassing); err != nil {
				_ = l.Register()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
