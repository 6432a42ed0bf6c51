package cluster

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// mariposa deploy health on a slot of the step machine (health_check =
// "manual" under MARIPOSA_FLEET_ENGINE=agent), on a real agent: its slot
// key carries no version, so the mark is for the version its holder's
// status says in this hold, else the one a slot claimed under the unit's
// record starts at; a hold older than the record, saying nothing, is not
// marked.
//
// Mutation-checked: without agentSlotVersion, every mark is refused ("does
// not say which version").
func TestMarkHealthyAgentSlot(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	sess, _, err := c.Session().Create(&api.SessionEntry{Behavior: api.SessionBehaviorDelete, TTL: "60s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, v []byte, session string) uint64 {
		t.Helper()
		p := &api.KVPair{Key: key, Value: v, Session: session}
		if session != "" {
			if ok, _, err := c.KV().Acquire(p, nil); err != nil || !ok {
				t.Fatalf("lock %s: %v %v", key, ok, err)
			}
		} else if _, err := c.KV().Put(p, nil); err != nil {
			t.Fatal(err)
		}
		got, _, err := c.KV().Get(key, nil)
		if err != nil || got == nil {
			t.Fatalf("read %s: %v", key, err)
		}
		return got.ModifyIndex
	}
	claim := func(k int) uint64 {
		b, _ := json.Marshal(SlotValue{Node: "n1", State: SlotHeld, Since: time.Now()})
		return put(SlotKey("web", k), b, sess)
	}
	marked := func(version string, k int) bool {
		p, _, err := c.KV().Get(ManualHealthKey("web", version, k), nil)
		return err == nil && p != nil
	}
	// Slot 0 claimed before the record, saying nothing: not marked.
	claim(0)
	rec := &UnitRecord{N: 2, Version: "shop/2", From: "shop/1", Stable: "shop/1", Status: DeployRunning, Promoted: true}
	put(RecordKey("web"), rec.Encode(), "")
	if _, err := MarkHealthy(c, "web", 0, "op"); err == nil || !strings.Contains(err.Error(), "which version") {
		t.Fatalf("a hold older than the record, no status: %v", err)
	}
	// Slot 1 claimed under the record: its start version.
	claim(1)
	if v, err := MarkHealthy(c, "web", 1, "op"); err != nil || v != "shop/2" || !marked("shop/2", 1) {
		t.Fatalf("claimed under the record: %q %v", v, err)
	}
	// Slot 0's status in this hold says it moves to shop/2.
	idx0, _, _ := c.KV().Get(SlotKey("web", 0), nil)
	st, _ := json.Marshal(HoldStatus{Index: idx0.ModifyIndex, Version: "shop/2"})
	put(UnitStatusKey("web", 0), st, sess)
	if v, err := MarkHealthy(c, "web", 0, "op"); err != nil || v != "shop/2" || !marked("shop/2", 0) {
		t.Fatalf("the status's version: %q %v", v, err)
	}
	// A status of an earlier hold says nothing of this one.
	st, _ = json.Marshal(HoldStatus{Index: 1, Version: "shop/9"})
	put(UnitStatusKey("web", 1), st, sess)
	if v, err := MarkHealthy(c, "web", 1, "op"); err != nil || v != "shop/2" {
		t.Fatalf("an earlier hold's status: %q %v", v, err)
	}
}
