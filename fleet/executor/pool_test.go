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

// An idle node keeps hearing a unit's index: a slot freed by its holder's
// lost session (no release, so no vacancy key moves) reaches it, and it
// takes the slot over. The index watch marks the units it answers as
// waiting for the loop's word before it posts the answers; the other way
// round, a loop that stepped an answer at once gave its word first and saw
// it erased, and the node never asked the unit's index again (CI's
// TestTakeoverAudited, 2 runs in 40 under load). Mutation check:
// Faults.AnsweredLate restores that order with the loop first; the node
// then never hears the slot freed (the mutant row expects that).
func TestIdleNodeHearsTheIndex(t *testing.T) {
	for _, mutant := range []bool{false, true} {
		t.Run(map[bool]string{false: "in order", true: "mutant"}[mutant], func(t *testing.T) {
			var faults func(int) executor.Faults
			if mutant {
				faults = func(int) executor.Faults {
					return executor.Faults{AnsweredLate: true}
				}
			}
			f := newFleet(t, fleetOptions{nodes: 3, faults: faults}, web)
			f.waitSettled(30 * time.Second)
			id := agent.SlotID{Unit: "web", K: 0}
			a := f.holderOf(id)
			// Every node has seen it hold the slot: the idle node's last
			// answer is in, and it waits for its next look. (The mutant's
			// idle node may never look again: it need not see it.)
			look, window := 10*time.Second, 15*time.Second
			if mutant {
				look, window = 3*time.Second, 10*time.Second
			}
			if !consultest.WaitFor(look, func() bool {
				for _, n := range f.nodes {
					if !sawHeldBy(n.ex.Stats(), id, a.name) {
						return false
					}
				}
				return true
			}) && !mutant {
				t.Fatalf("not every node saw %s hold %s", a.name, id)
			}
			a.ex.Kill()
			f.rec.killNode(a.name)
			keys, _ := f.slotKeys("web")
			if _, err := f.c.Session().Destroy(keys[0].Session, nil); err != nil {
				t.Fatal(err)
			}
			taken := consultest.WaitFor(window, func() bool {
				keys, err := f.slotKeys("web")
				if err != nil || keys[0] == nil || keys[0].Session == "" {
					return false
				}
				n, err := f.nodeOf(keys[0].Session)
				return err == nil && n != a.name
			})
			if taken == mutant {
				t.Fatalf("%s taken over after its holder's session was lost: %v, want %v", id, taken, !mutant)
			}
		})
	}
}
