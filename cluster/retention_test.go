package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// kvIndex is the index of everything under mariposa/: it moves with every
// write there, deletes included (their tombstones).
func kvIndex(t *testing.T, c *api.Client) uint64 {
	t.Helper()
	_, meta, err := c.KV().List(Prefix, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	return meta.LastIndex
}

// PruneAudit deletes exactly the days that ended more than retention ago,
// a day prefix at a time, keeps everything else, and writes nothing when
// no day is that old.
func TestPruneAudit(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	now := time.Date(2026, 11, 23, 10, 30, 0, 0, time.UTC)
	ctx := context.Background()

	if days, err := PruneAudit(ctx, c, now, DefaultAuditRetention); err != nil || len(days) != 0 {
		t.Fatalf("no records: %v %v", days, err)
	}
	var ops api.TxnOps
	for _, ago := range []int{10, 8, 7, 1, 0} { // days before now
		for i := range 3 {
			ops = append(ops, AuditOp(AuditEvent{At: now.Add(-time.Duration(ago)*24*time.Hour + time.Duration(i)*time.Minute),
				Node: "n1", Action: "claim", Reason: fmt.Sprint(ago, " days ago")}))
		}
	}
	// Not a day (written by hand), and a key outside audit/: kept.
	ops = append(ops,
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: AuditPrefix + "notes/x", Value: []byte("x")}},
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: SlotsPrefix + "web/0", Value: []byte("{}")}})
	if ok, resp, _, err := c.Txn().Txn(ops, nil); err != nil || !ok {
		t.Fatalf("%v %+v", err, resp)
	}
	days, err := AuditDays(ctx, c)
	want := []string{AuditPrefix + "2026-11-13/", AuditPrefix + "2026-11-15/", AuditPrefix + "2026-11-16/",
		AuditPrefix + "2026-11-22/", AuditPrefix + "2026-11-23/"}
	if err != nil || !slices.Equal(days, want) {
		t.Fatalf("days %v %v", days, err)
	}

	// 7 days: 11-16 ended on 11-17 00:00, less than 7 days before now.
	deleted, err := PruneAudit(ctx, c, now, DefaultAuditRetention)
	if err != nil || !slices.Equal(deleted, want[:2]) {
		t.Fatalf("deleted %v %v", deleted, err)
	}
	keys, _, _ := c.KV().Keys(Prefix, "", nil)
	if len(keys) != 3*3+2 {
		t.Fatalf("left %d keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		for _, d := range deleted {
			if len(k) >= len(d) && k[:len(d)] == d {
				t.Fatalf("%s left", k)
			}
		}
	}

	// Idle: nothing old, nothing written (the index of mariposa/ stays).
	before := kvIndex(t, c)
	for range 3 {
		if deleted, err := PruneAudit(ctx, c, now, DefaultAuditRetention); err != nil || len(deleted) != 0 {
			t.Fatalf("idle: deleted %v %v", deleted, err)
		}
	}
	if after := kvIndex(t, c); after != before {
		t.Fatalf("an idle prune wrote: index %d -> %d", before, after)
	}

	// Retention 0 keeps everything; a day later, 11-16 goes.
	if deleted, err := PruneAudit(ctx, c, now.Add(30*24*time.Hour), 0); err != nil || len(deleted) != 0 {
		t.Fatalf("retention 0: %v %v", deleted, err)
	}
	if deleted, err := PruneAudit(ctx, c, now.Add(24*time.Hour), DefaultAuditRetention); err != nil ||
		!slices.Equal(deleted, want[2:3]) {
		t.Fatalf("a day later: %v %v", deleted, err)
	}
}
