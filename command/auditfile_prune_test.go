package command

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// pruneAudit deletes the audit days past retention only while the fleet
// says this node is the first live supervisor (the step machine's
// executor's FirstLive), on real Consul: an old day survives while it is
// not, and goes once it is; today's stays.
// Mutation check: pruneAudit not asking firstLive deletes the old day
// while it is not first (fails).
func TestPruneAuditFirstLive(t *testing.T) {
	agent := consultest.NewDev(t, consultest.Options{})
	c := agent.Client(t)
	now := time.Now()
	old, today := cluster.AuditDay(now.Add(-30*24*time.Hour))+"x", cluster.AuditDay(now)+"y"
	for _, k := range []string{old, today} {
		if _, err := c.KV().Put(&api.KVPair{Key: k, Value: []byte("{}")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	oldFirst, oldEvery := auditPruneFirst, auditPruneEvery
	auditPruneFirst, auditPruneEvery = time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { auditPruneFirst, auditPruneEvery = oldFirst, oldEvery })
	var first atomic.Bool
	var asked atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pruneAudit(ctx, func() bool { asked.Add(1); return first.Load() }, c, 7*24*time.Hour, hclog.NewNullLogger())
	}()
	t.Cleanup(func() { cancel(); <-done })
	if !consultest.WaitFor(10*time.Second, func() bool { return asked.Load() >= 2 }) {
		t.Fatal("pruneAudit never asked whether this node is first live")
	}
	if p, _, err := c.KV().Get(old, nil); err != nil || p == nil {
		t.Fatalf("the old day went while this node was not first live: %v, %v", p, err)
	}
	first.Store(true)
	if !consultest.WaitFor(10*time.Second, func() bool {
		p, _, err := c.KV().Get(old, nil)
		return err == nil && p == nil
	}) {
		t.Fatal("the old day was not deleted once this node was first live")
	}
	if p, _, err := c.KV().Get(today, nil); err != nil || p == nil {
		t.Fatalf("today's records went: %v, %v", p, err)
	}
}
