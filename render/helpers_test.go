package render

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// testLogger writes to stderr, not t.Log: consul-template's views may still
// log through the standard logger after a test has ended.
func testLogger() hclog.Logger {
	lvl := hclog.Warn
	if os.Getenv("MARIPOSA_TEST_LOG") != "" {
		lvl = hclog.Trace
	}
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: lvl, Output: os.Stderr})
}

// startManager runs a manager against addr until the test ends.
func startManager(t testing.TB, addr string, opts ...Options) *Manager {
	t.Helper()
	m := NewManager(&api.Config{Address: addr}, testLogger(), opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// follower reads a service's state as the supervisor would, keeping every
// event it hands out.
type follower struct {
	sd     *ServiceData
	events []TemplateEvent
	last   ServiceState
}

func follow(sd *ServiceData) *follower { return &follower{sd: sd} }

// until waits (on Changed, with a deadline) for cond to hold.
func (f *follower) until(t testing.TB, what string, cond func(ServiceState) bool) ServiceState {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		st := f.sd.State()
		f.events = append(f.events, st.Events...)
		f.last = st
		if cond(st) {
			return st
		}
		select {
		case <-f.sd.Changed():
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; last state: %+v", what, st)
		}
	}
}

// templateService is a service in dir with one template per text.
func templateService(dir, name string, texts ...string) *schema.Service {
	svc := &schema.Service{Name: name, Dir: dir, SourceDir: dir, SourceFile: filepath.Join(dir, name+".hcl")}
	for i, text := range texts {
		svc.Templates = append(svc.Templates, &schema.Template{
			Contents:    text,
			Destination: filepath.Join(dir, name+"-"+string(rune('a'+i))+".conf"),
			Perms:       0o644,
			ChangeMode:  "restart",
		})
	}
	return svc
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func put(t testing.TB, c *api.Client, k, v string) {
	t.Helper()
	if _, err := c.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
		t.Fatal(err)
	}
}

// renders counts the files a template wrote.
func renders(sd *ServiceData, i int) int {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	return sd.templates[i].renders
}

func newAgent(t testing.TB) (*consultest.Agent, *api.Client) {
	t.Helper()
	a := consultest.NewDev(t)
	return a, a.Client(t)
}
