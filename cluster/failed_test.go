package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// ParseControl reads the step machine's failed slots (a corrupt mark still
// fails its slot) and the queue's drops.
func TestParseControlFailedAndDrops(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	good := FailedRecord{Node: "n1", Reason: "restarts exhausted", At: at}
	var reported []string
	c := ParseControl(api.KVPairs{
		{Key: FailedKey("web", 2), Value: good.Encode(), ModifyIndex: 7},
		{Key: FailedKey("db", 0), Value: []byte("{"), ModifyIndex: 9},
		{Key: DropsPrefix + "3b960086", Value: []byte(`{"by":"alice","at":"2026-01-01T00:00:00Z"}`)},
	}, func(key, msg string, err error) { reported = append(reported, key) })
	if r, ok := c.Failed["web/2"]; !ok || r.Node != "n1" || r.Reason != good.Reason || !r.At.Equal(at) || r.Index != 7 {
		t.Fatalf("web/2: %+v %v", r, ok)
	}
	if r, ok := c.Failed["db/0"]; !ok || r.Index != 9 || len(reported) != 1 || reported[0] != FailedKey("db", 0) {
		t.Fatalf("a corrupt mark: %+v %v, reported %v", r, ok, reported)
	}
	if d, ok := c.Drops["3b960086"]; !ok || d.By != "alice" {
		t.Fatalf("drops %+v", c.Drops)
	}
	if len(c.Pauses) != 0 || len(c.Drains) != 0 {
		t.Fatalf("pauses %v drains %v", c.Pauses, c.Drains)
	}
	if IntentID("node-1", "restart", "crash@crash/0") != intentID("node-1", "restart", "crash@crash/0") {
		t.Fatal("IntentID is not FollowPauses' intentID")
	}
}

// Control.PauseFunc is FollowPauses' (pauseFuncOf): a pause of scope all
// holds a slot's instance, with its drop.
func TestControlPauseFunc(t *testing.T) {
	c := Control{Pauses: map[string]PauseRecord{"web": {Scope: PauseAll, Unit: "web", Reason: "x", Actor: "op"}},
		Drops: map[string]Drop{IntentID("n1", "restart", "web@web/0"): {By: "alice"}}}
	f := c.PauseFunc("n1")
	p := f(&schema.Service{Name: "web"}, &supervisor.SlotInfo{Unit: "web", Index: 0})
	if p.Why == "" || p.Dropped != "alice" {
		t.Fatalf("%+v", p)
	}
	if p := f(&schema.Service{Name: "db"}, &supervisor.SlotInfo{Unit: "db", Index: 0}); p.Why != "" {
		t.Fatalf("db: %+v", p)
	}
	if (Control{}).PauseFunc("n1") != nil {
		t.Fatal("nothing paused: a func")
	}
}
