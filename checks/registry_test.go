package checks

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// startRegistry runs a registry against agent the way mariposa does: the
// supervisor heartbeat is slow (SupervisorTTL/3), far slower than any args
// check's TTL, so only the args checks' own results can keep those alive.
func startRegistry(t *testing.T, agent *consultest.Agent) (*Registry, *api.Client) {
	t.Helper()
	c := agent.Client(t)
	reg := NewRegistry(c, agent.Name, "127.0.0.1", hclog.NewNullLogger(), 10*time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); reg.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return reg, c
}

// runArgsService registers a service with one args check and runs the check
// until the test ends.
func runArgsService(t *testing.T, reg *Registry, node, name string, chk *schema.Check) string {
	t.Helper()
	svc := &schema.Service{Name: name, Checks: []*schema.Check{chk}}
	reg.Register(Registration(svc, node, RegOptions{SupervisorTTL: 30 * time.Minute, Status: api.HealthPassing}),
		Result{Health: api.HealthPassing, Output: "running"})
	id := ServiceID(svc, node)
	sc := &ScriptCheck{ServiceID: id, Check: chk, Registry: reg, Log: hclog.NewNullLogger()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); sc.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return CheckID(id, chk.Name)
}

// agentCheck reads the check from the local agent, which marks a TTL check
// critical the moment its TTL runs out.
func agentCheckState(c *api.Client, id string) (string, string) {
	cs, err := c.Agent().ChecksWithFilter(fmt.Sprintf("CheckID == %q", id))
	if err != nil {
		return "", err.Error()
	}
	if ch, ok := cs[id]; ok {
		return ch.Status, ch.Output
	}
	return "", "no check"
}

// An args check whose result never changes stays at that result for as long
// as mariposa runs it: each run refreshes the TTL. Before, an unchanged
// result was not sent again, the TTL (2 x interval + timeout) ran out and
// the check turned critical ("TTL expired"), which restarts the service.
func TestArgsCheckUnchangedResultKeepsTTL(t *testing.T) {
	agent := consultest.NewDev(t)
	reg, c := startRegistry(t, agent)
	cases := []struct {
		name              string
		script            string
		health            string
		output            string
		interval, timeout time.Duration
	}{
		// Timeouts far above what the scripts need: a loaded machine must
		// not time them out.
		{"steady-pass", "echo lag is 12s; exit 0", api.HealthPassing, "lag is 12s", 300 * time.Millisecond, 2 * time.Second},
		{"steady-warn", "echo lag is 40s; exit 1", api.HealthWarning, "lag is 40s", 300 * time.Millisecond, 2 * time.Second},
		// A run that outlasts interval + timeout without timing out: it
		// exits in time, but a descendant that left its process group holds
		// the output open and the result waits a second more for it.
		// Results are then about 1.4s apart, the TTL is 1.2s; the previous
		// result is sent again meanwhile.
		{"slow-pass", "setsid sleep 2 & sleep 0.3; echo slow but fine", api.HealthPassing, "slow but fine", 100 * time.Millisecond, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chk := &schema.Check{Name: "probe", Kind: schema.CheckArgs,
				Args: []string{"sh", "-c", tc.script}, Interval: tc.interval, Timeout: tc.timeout}
			ttl := ArgsCheckTTL(chk)
			id := runArgsService(t, reg, agent.Name, tc.name, chk)
			var seen string
			if !consultest.WaitFor(15*time.Second, func() bool {
				st, out := agentCheckState(c, id)
				seen = st + " " + out
				return st == tc.health && out == tc.output
			}) {
				t.Fatalf("check never %s %q; last seen %s", tc.health, tc.output, seen)
			}
			// Four TTLs: without refreshes it would have expired three times.
			deadline := time.Now().Add(4 * ttl)
			for time.Now().Before(deadline) {
				if st, out := agentCheckState(c, id); st != tc.health || strings.Contains(out, "TTL expired") {
					t.Fatalf("check turned %s %q with an unchanged result (TTL %s)", st, out, ttl)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// The agent away for longer than the TTL (a dev agent restarted, with its
// state lost): once it is back the registry registers the service again and
// the args check reports its result, and keeps it, without waiting for any
// change.
func TestArgsCheckAfterAgentRestart(t *testing.T) {
	agent := consultest.NewDev(t)
	reg, c := startRegistry(t, agent)
	const interval, timeout = 300 * time.Millisecond, 2 * time.Second
	ttl := ArgsCheckTTL(&schema.Check{Interval: interval, Timeout: timeout})
	id := runArgsService(t, reg, agent.Name, "restarted", &schema.Check{Name: "probe", Kind: schema.CheckArgs,
		Args: []string{"sh", "-c", "echo fine"}, Interval: interval, Timeout: timeout})
	passing := func() bool { st, _ := agentCheckState(c, id); return st == api.HealthPassing }
	if !consultest.WaitFor(15*time.Second, passing) {
		t.Fatal("check never passing")
	}
	agent.Stop()
	time.Sleep(2 * ttl) // the outage itself: longer than the TTL
	agent.Start(t)
	// Nothing tells the registry the agent was gone but its own failed
	// calls: it retries within a second and registers everything again.
	if !consultest.WaitFor(15*time.Second, passing) {
		st, out := agentCheckState(c, id)
		t.Fatalf("check not passing after the agent came back: %s %q", st, out)
	}
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) {
		if st, out := agentCheckState(c, id); st != api.HealthPassing {
			t.Fatalf("check turned %s %q after the agent came back", st, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
