package executor_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// An upgrade in place under the step machine: executor A holds slots (one
// exclusive) and hands them over as the exec would (Handover, then gone
// without releasing anything); executor B, the next image's, adopts them:
// the same session, the slot keys untouched (same ModifyIndex: the
// instances' fencing tokens stay valid), no transaction at all, the
// instances never started or stopped again, the exclusive hold confirmed
// by B; B's graceful stop then releases them (they are its own).
func TestUpgradeAdoptsHolds(t *testing.T) {
	db := agent.Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}
	web := agent.Unit{Name: "web", Count: 2, MaxPerNode: 2}
	f := newFleet(t, fleetOptions{nodes: 1}, db, web)
	f.waitSettled(30 * time.Second)
	n := f.nodes[0]
	before := map[agent.SlotID]*api.KVPair{}
	for _, u := range []string{"db", "web"} {
		keys, err := f.slotKeys(u)
		if err != nil {
			t.Fatal(err)
		}
		for k, p := range keys {
			before[agent.SlotID{Unit: u, K: k}] = p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, _, err := n.ex.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n.ex.Kill() // the exec: nothing released, the session left as it is
	// The handover travels as JSON in the upgrade state.
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var got executor.Handover
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Session != before[agent.SlotID{Unit: "db", K: 0}].Session || len(got.Slots) != 3 {
		t.Fatalf("handover: %s", b)
	}
	for _, s := range got.Slots {
		if p := before[s.Slot()]; p == nil || s.Index != p.ModifyIndex {
			t.Fatalf("%s handed over with token %d, key %+v", s.Slot(), s.Index, p)
		}
		if s.Exclusive && s.Confirmed == 0 {
			t.Fatalf("%s handed over without its confirmation", s.Slot())
		}
	}
	events := len(f.rec.log())
	handed := time.Now()

	// The next image: a new executor, its own way to the agent (its
	// requests counted apart), the same node and instances.
	proxy := newCutProxy(t, n.proxy.addr) // (A's way to the agent, idle now)
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = proxy.addr
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		confirmed []time.Time
	)
	r := &runner{rec: f.rec, node: n.name, healthyAfter: 200 * time.Millisecond}
	nb := executor.New(executor.Config{Client: c, Node: n.name, Checks: []string{n.check}, Seed: 9, Instances: r,
		Adopt: &got, Log: consultest.Logger(t, n.name+"'"),
		Faults: executor.Faults{Stepped: func(in any) {
			if cd, ok := in.(agent.ConfirmDone); ok && cd.Err == nil && cd.Held[agent.SlotID{Unit: "db", K: 0}] {
				mu.Lock()
				confirmed = append(confirmed, cd.Sent)
				mu.Unlock()
			}
		}}})
	r.ex = nb
	nb.Start()
	nb.SetUnits([]agent.Unit{db, web})
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			nb.Stop(ctx)
		}
	})
	// Past the lock delay: any watchdog would have fired, any claim or
	// stray release been sent.
	if !consultest.WaitFor(10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(confirmed) >= 3 && time.Since(handed) > 3*time.Second
	}) {
		t.Fatalf("the exclusive hold handed over was not confirmed by the new executor (%d confirmations)", len(confirmed))
	}
	for _, e := range f.rec.log()[events:] {
		if !e.healthy {
			t.Fatalf("an instance started or stopped across the upgrade: %+v", e)
		}
	}
	for id, p := range before {
		keys, err := f.slotKeys(id.Unit)
		if err != nil {
			t.Fatal(err)
		}
		if q := keys[id.K]; q == nil || q.Session != p.Session || q.ModifyIndex != p.ModifyIndex || q.LockIndex != p.LockIndex {
			t.Errorf("%s: key %+v after the upgrade, %+v before", id, q, p)
		}
	}
	counts := proxy.counts()
	if counts["txn"] != 0 {
		t.Errorf("the new executor sent %d transactions (a claim or a release of a slot handed over)", counts["txn"])
	}
	if counts["session"] == 0 {
		t.Error("the session handed over was never renewed")
	}
	if err := f.settled(db); err != nil {
		t.Error(err)
	}
	if err := f.settled(web); err != nil {
		t.Error(err)
	}
	// The holds are B's: its graceful stop releases them.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := nb.Stop(ctx2); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, u := range []string{"db", "web"} {
		keys, _ := f.slotKeys(u)
		for k, p := range keys {
			if p.Session != "" {
				t.Errorf("%s/%d still held after the new executor's stop", u, k)
			}
		}
	}
}

// An upgrade that fails after the handover (the exec refused) thaws the
// executor: it goes on confirming its hold and running as before.
func TestHandoverThawed(t *testing.T) {
	db := agent.Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}
	var (
		mu   sync.Mutex
		last time.Time // the last confirmation's send time
	)
	f := newFleet(t, fleetOptions{nodes: 1, faults: func(int) executor.Faults {
		return executor.Faults{Stepped: func(in any) {
			if cd, ok := in.(agent.ConfirmDone); ok && cd.Err == nil && cd.Held[agent.SlotID{Unit: "db", K: 0}] {
				mu.Lock()
				last = cd.Sent
				mu.Unlock()
			}
		}}
	}}, db)
	f.waitSettled(30 * time.Second)
	events := len(f.rec.log())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, thaw, err := f.nodes[0].ex.Handover(ctx)
	if err != nil || len(h.Slots) != 1 {
		t.Fatalf("handover %+v: %v", h, err)
	}
	thawed := time.Now()
	thaw()
	thaw() // (twice is once)
	if !consultest.WaitFor(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return last.After(thawed.Add(time.Second))
	}) {
		t.Fatal("no confirmation after the thaw: the executor stays parked")
	}
	for _, e := range f.rec.log()[events:] {
		if !e.healthy {
			t.Fatalf("the instance changed after a thawed handover: %+v", e)
		}
	}
	if err := f.settled(db); err != nil {
		t.Fatal(err)
	}
}
