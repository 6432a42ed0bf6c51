package cluster

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
)

func volumeUnit() UnitSpec {
	p := &schema.Placement{Count: 1, Exclusive: true, Volumes: []*schema.Volume{{Name: "data", Path: "data",
		Handoff: schema.HandoffSnapshot, OnMissing: schema.OnMissingLatest, RestoreTimeout: time.Minute, Interval: 5 * time.Minute}}}
	return UnitSpec{Unit: Unit{Name: "db", Placement: p, HasVolume: true}, Services: []*schema.Service{{Name: "db", Placement: p}}}
}

// volumeNode is one node of the handoff tests: its lease, volume store,
// fleet and the HTTP API that serves its snapshots.
type volumeNode struct {
	l     *lease.Lease
	store *volume.Store
	f     *Fleet
}

func newVolumeNode(t *testing.T, c *api.Client, name string) *volumeNode {
	t.Helper()
	l := lease.New(lease.Config{Client: c, Checks: []string{consultest.StartLiveness(t, c, name).CheckID}, Log: consultest.Logger(t, name)})
	t.Cleanup(l.Close)
	store, err := volume.Open(t.TempDir(), consultest.Logger(t, name))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(store.Handler(AuthorizeVolume(c)))
	t.Cleanup(srv.Close)
	f := NewFleet(FleetConfig{Client: c, Node: name, Lease: l, Volumes: store, APIURL: srv.URL, Log: consultest.Logger(t, name)})
	return &volumeNode{l: l, store: store, f: f}
}

// take claims slot db/0 for n, as the fleet does, and returns it held.
func (n *volumeNode) take(t *testing.T, prev string) *heldSlot {
	t.Helper()
	term, err := n.l.Acquire(context.Background(), lease.Hold{Key: SlotKey("db", 0),
		Value: SlotValue{Node: n.f.cfg.Node, State: SlotHeld}.encode()})
	if err != nil {
		t.Fatal(err)
	}
	return &heldSlot{unit: volumeUnit(), k: 0, term: term, prevNode: prev}
}

// A planned handoff: the holder's release carries the snapshot of its
// stopped volume; the next holder restores it from the old holder's API
// (which checks that the caller holds the slot) before the start, with
// its record. A stale holder (its session gone) publishes nothing: the
// unlock that fences the handoff fails, and the whole transaction with it.
//
// Mutation check, run by hand: with the handoff written in a transaction
// of its own (not with the unlock), the stale holder's handoff appears
// and the test fails.
func TestHandoffFenced(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	ctx := context.Background()
	a, b := newVolumeNode(t, c, "n1"), newVolumeNode(t, c, "n2")

	// n1 holds the slot and writes its data.
	ha := a.take(t, "")
	if note, err := a.f.prepareVolumes(ctx, ha); err != nil || note != "" {
		t.Fatalf("first start: %q %v", note, err)
	}
	dir := a.store.Dir("db", 0, "data")
	if err := os.WriteFile(filepath.Join(dir, "rows"), []byte("alpha\nbeta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Released (its instance stopped): the handoff goes with the unlock.
	a.f.release(ha, SlotReleased, "drained", nil)
	p, _, err := c.KV().Get(HandoffKey("db", 0), nil)
	if err != nil || p == nil {
		t.Fatalf("no handoff: %v", err)
	}
	ho, err := DecodeHandoff(p.Value)
	if err != nil || ho.Node != "n1" || ho.LockIndex != ha.term.LockIndex || ho.Volumes["data"].Size == 0 {
		t.Fatalf("handoff %+v %v", ho, err)
	}

	// n2 takes the slot and restores n1's data before its start.
	hb := b.take(t, "n1")
	if hb.term.LockIndex != ho.LockIndex+1 {
		t.Fatalf("lock index %d after %d", hb.term.LockIndex, ho.LockIndex)
	}
	note, err := b.f.prepareVolumes(ctx, hb)
	if err != nil || !strings.Contains(note, "restored the handoff") {
		t.Fatalf("restore: %q %v", note, err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.store.Dir("db", 0, "data"), "rows")); string(got) != "alpha\nbeta\n" {
		t.Fatalf("restored %q", got)
	}
	// Only the slot's holder may fetch it: n1's API refuses anyone else.
	src := volume.Source{URL: volume.SnapshotURL(a.f.cfg.APIURL, "db", 0, "data", ho.Volumes["data"].SHA256),
		SHA256: ho.Volumes["data"].SHA256, Size: ho.Volumes["data"].Size}
	if _, err := b.store.Restore(ctx, "db", 0, "data", src, nil, nil, time.Minute); err == nil {
		t.Fatal("a fetch without the holder's session was served")
	}

	// n2 goes stale: its session is destroyed (as when it is frozen past
	// its TTL) while it believes it holds the slot. Its release, handoff
	// included, must fail.
	if err := os.WriteFile(filepath.Join(b.store.Dir("db", 0, "data"), "rows"), []byte("stale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Session().Destroy(hb.term.Session, nil); err != nil {
		t.Fatal(err)
	}
	b.f.release(hb, SlotReleased, "drained", nil)
	p, _, _ = c.KV().Get(HandoffKey("db", 0), nil)
	if after, _ := DecodeHandoff(p.Value); after.Node != "n1" {
		t.Fatalf("a stale holder published a handoff: %+v", after)
	}
}

// An unplanned loss: without a handoff from the last holder, on_missing
// decides: "fail" fails the slot, "empty" starts empty, and the data of a
// slot this node held last is kept.
func TestPrepareOnMissing(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	ctx := context.Background()
	n := newVolumeNode(t, c, "n1")
	h := n.take(t, "gone")
	h.unit.Unit.Placement.Volumes[0].OnMissing = schema.OnMissingFail
	if _, err := n.f.prepareVolumes(ctx, h); err == nil || !strings.Contains(err.Error(), "on_missing is \"fail\"") {
		t.Fatalf("fail: %v", err)
	}
	dir := n.store.Dir("db", 0, "data")
	if err := os.WriteFile(filepath.Join(dir, "old"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.unit.Unit.Placement.Volumes[0].OnMissing = schema.OnMissingEmpty
	if note, err := n.f.prepareVolumes(ctx, h); err != nil || !strings.Contains(note, "started empty") {
		t.Fatalf("empty: %q %v", note, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("not emptied: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.prevNode = "n1"
	if note, err := n.f.prepareVolumes(ctx, h); err != nil || !strings.Contains(note, "held the slot last") {
		t.Fatalf("kept: %q %v", note, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mine")); err != nil {
		t.Fatal("this node's data was not kept")
	}
}

// A handoff read from Consul is checked before use.
func TestDecodeHandoff(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{`{"node":"n1","lock_index":3,"volumes":{"data":{"sha256":"` + strings.Repeat("a", 64) + `","size":10}}}`, ""},
		{`{"node":"n1"}`, "no node or lock index"},
		{`{"node":"n1","lock_index":3,"volumes":{"data":{"sha256":"x","size":10}}}`, "no valid checksum"},
		{`not json`, "handoff:"},
	} {
		_, err := DecodeHandoff([]byte(tc.in))
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.err)
		}
	}
}

func FuzzDecodeHandoff(f *testing.F) {
	f.Add([]byte(`{"node":"n1","lock_index":3,"volumes":{"data":{"sha256":"` + strings.Repeat("a", 64) + `","size":10}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = DecodeHandoff(b) })
}

func FuzzDecodeCopies(f *testing.F) {
	f.Add([]byte(`[{"node":"n2","url":"http://127.0.0.1:1","sha256":"` + strings.Repeat("b", 64) + `","size":3,"taken_at":"2026-11-23T10:00:00Z"}]`))
	f.Add([]byte(`[{}]`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = DecodeCopies(b) })
}
