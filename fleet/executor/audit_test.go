package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// Every claim and every release is written with its audit record, in its
// transaction (as cluster.Fleet's are): a fleet settled on a unit of count
// 2 has a claim record for each slot; a graceful stop of a holder adds a
// release record, and the claim of the slot by another node another claim
// record. Mutation check: without the audit op in claimOpsFor, no claim
// records (the test fails); without it in release, no release record.
func TestClaimsAndReleasesAudited(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 3}, web)
	f.waitSettled(30 * time.Second)
	actions := func() map[string]int {
		pairs, _, err := f.c.KV().List(cluster.AuditPrefix, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, p := range pairs {
			var e cluster.AuditEvent
			if json.Unmarshal(p.Value, &e) == nil && e.Service == "web" {
				out[e.Action]++
			}
		}
		return out
	}
	if got := actions(); got["claim"] != web.Count || got["release"] != 0 {
		t.Fatalf("audit records after settling: %v, want %d claim", got, web.Count)
	}
	a := f.holderOf(agent.SlotID{Unit: "web", K: 0})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.ex.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	f.waitSettled(30 * time.Second)
	if got := actions(); got["claim"] != web.Count+1 || got["release"] != 1 {
		t.Fatalf("audit records after a graceful stop: %v, want %d claim, 1 release", got, web.Count+1)
	}
}
