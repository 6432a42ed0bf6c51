package cluster

import (
	"context"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/lease"
)

// A slot this node's session holds in Consul without the node knowing (a
// claim transaction applied whose answer was lost) is released once it
// has looked so for strayGrace, with its record; a slot the node knows it
// holds, or one another session holds, is left alone.
func TestReleaseStrays(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	l := lease.New(lease.Config{Client: c, Checks: []string{consultest.StartLiveness(t, c, "n1").CheckID}, Log: consultest.Logger(t, "n1")})
	t.Cleanup(l.Close)
	ctx := context.Background()
	// A hold of its own gives the lease its session.
	if _, err := l.TryAcquire(ctx, lease.Hold{Key: "mariposa/other"}); err != nil {
		t.Fatal(err)
	}
	mine := l.Session()
	other, _, _ := c.Session().Create(&api.SessionEntry{TTL: "30s", Behavior: "release"}, nil)
	v := SlotValue{Node: "n1", State: SlotHeld}
	for key, sess := range map[string]string{SlotKey("web", 0): mine, SlotKey("web", 1): other} {
		if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Value: v.encode(), Session: sess}, nil); !ok || err != nil {
			t.Fatal(key, ok, err)
		}
	}
	f := NewFleet(FleetConfig{Client: c, Node: "n1", Lease: l})
	read := func() {
		pairs, _, _ := c.KV().List(SlotsPrefix, nil)
		f.mu.Lock()
		f.slots = parseSlots(pairs, func(string, string, error) {})
		for id, s := range map[string]slotKV{"web/0": f.slots["web"][0], "web/1": f.slots["web"][1]} {
			if s.session == mine {
				f.noteStrayLocked(id, t0)
			}
		}
		f.mu.Unlock()
	}
	read()
	f.releaseStrays(ctx, t0.Add(strayGrace/2))
	if p, _, _ := c.KV().Get(SlotKey("web", 0), nil); p.Session != mine {
		t.Fatal("released before strayGrace")
	}
	f.releaseStrays(ctx, t0.Add(strayGrace))
	if p, _, _ := c.KV().Get(SlotKey("web", 0), nil); p.Session != "" {
		t.Fatal("the stray is still held")
	}
	if p, _, _ := c.KV().Get(SlotKey("web", 1), nil); p.Session != other {
		t.Fatal("another session's slot was released")
	}
	if recs, _, _ := c.KV().List(AuditPrefix, nil); len(recs) != 1 {
		t.Fatalf("%d audit records", len(recs))
	}
}
