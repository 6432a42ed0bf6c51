package executor_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// One node with 120 units, on an agent that allows a client address 90
// connections (limits.http_max_conns_per_client; Consul's default is
// 200): it holds every slot, each instance with its token, never having
// more than the executor's bound open (3 x 16 buckets + 16 requests + 5 +
// the confirmations: 72), where a unit's three watches of their own are
// 360 blocking queries. With a bucket per unit (the mutation), the node
// opens more than the agent allows.
func TestManyUnitsWithinConnectionLimit(t *testing.T) {
	const units, limit, bound = 120, 90, 3*executor.DefaultBuckets + executor.DefaultMaxRequests + 5 + 3
	for _, tc := range []struct {
		name    string
		buckets int
		within  bool
	}{{"bounded", 0, true}, {"a bucket per unit (mutation)", units, false}} {
		t.Run(tc.name, func(t *testing.T) {
			a := consultest.NewDev(t, consultest.Options{ExtraConfig: map[string]any{
				"limits": map[string]any{"http_max_conns_per_client": limit}}})
			var us []agent.Unit
			for i := range units {
				us = append(us, agent.Unit{Name: fmt.Sprintf("u%03d", i), Count: 1, MaxPerNode: 1, Exclusive: i%4 == 0})
			}
			f := &fleet{t: t, c: a.Client(t), rec: newRecorder(), units: us, sessNode: map[string]string{}}
			n := &node{name: "node0", check: "mariposa-node0:mariposa"}
			f.setCheck(n, api.HealthPassing)
			px := newTCPProxy(t, a.HTTPAddr())
			cfg := api.DefaultNonPooledConfig()
			cfg.Address = px.addr
			c, err := api.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := &runner{rec: f.rec, node: n.name, healthyAfter: 200 * time.Millisecond}
			n.ex = executor.New(executor.Config{Client: c, Node: n.name, Checks: []string{n.check}, LockDelay: 3 * time.Second,
				Seed: 1, Instances: r, Control: true, Buckets: tc.buckets, Log: consultest.Logger(t, n.name)})
			r.ex = n.ex
			f.nodes = append(f.nodes, n)
			n.ex.Start()
			n.ex.SetUnits(us)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				n.ex.Stop(ctx)
			})
			if !tc.within {
				if !consultest.WaitFor(30*time.Second, func() bool { return px.mostOpen() > limit }) {
					t.Fatalf("a bucket per unit stayed within %d connections (most %d): the test cannot tell", limit, px.mostOpen())
				}
				return
			}
			f.waitSettled(90 * time.Second)
			// At rest: a change of one unit reaches the node.
			us2 := slices.Clone(us)
			us2[7].Count = 0
			f.setUnits(us2...)
			f.waitSettled(30 * time.Second)
			// At rest, every bucket's vacancy and deployment queries block
			// (and most of their index queries).
			if !consultest.WaitFor(30*time.Second, func() bool { return px.openNow() >= 2*executor.DefaultBuckets+3 }) {
				t.Fatalf("only %d connections open at rest: the watches are not blocking", px.openNow())
			}
			if m := px.mostOpen(); m > bound {
				t.Fatalf("the node had %d connections open at once, more than its bound %d", m, bound)
			}
			t.Logf("most connections open at once: %d (bound %d, agent's limit %d)", px.mostOpen(), bound, limit)
		})
	}
}
