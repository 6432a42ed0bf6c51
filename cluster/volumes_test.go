package cluster

import (
	"context"
	"encoding/json"
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
	if note, _, err := a.f.prepareVolumes(ctx, ha); err != nil || note != "" {
		t.Fatalf("first start: %q %v", note, err)
	}
	ha.volumesReady = true
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
	note, _, err := b.f.prepareVolumes(ctx, hb)
	if err != nil || !strings.Contains(note, "restored the handoff") {
		t.Fatalf("restore: %q %v", note, err)
	}
	hb.volumesReady = true
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
	if _, _, err := n.f.prepareVolumes(ctx, h); err == nil || !strings.Contains(err.Error(), "on_missing is \"fail\"") {
		t.Fatalf("fail: %v", err)
	}
	dir := n.store.Dir("db", 0, "data")
	if err := os.WriteFile(filepath.Join(dir, "old"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.unit.Unit.Placement.Volumes[0].OnMissing = schema.OnMissingEmpty
	if note, _, err := n.f.prepareVolumes(ctx, h); err != nil || !strings.Contains(note, "started empty") {
		t.Fatalf("empty: %q %v", note, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("not emptied: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.prevNode = "n1"
	if note, _, err := n.f.prepareVolumes(ctx, h); err != nil || !strings.Contains(note, "held the slot last") {
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

// Where a new holder's data comes from is decided by generation (the
// fencing index of the term that wrote it), never by who handed what off.
func TestChooseData(t *testing.T) {
	ho := func(node string, lockIndex, gen uint64) *Handoff {
		return &Handoff{Node: node, LockIndex: lockIndex, TermIndex: gen}
	}
	fw := ho("n2", 7, 40)
	fw.ForwardedBy = "n1"
	for _, tc := range []struct {
		name string
		in   dataCandidates
		want dataChoice
	}{
		{"first holder", dataCandidates{Self: "n1", LockIndex: 1}, dataEmpty},
		{"planned from another node", dataCandidates{Self: "n3", LockIndex: 6, PrevNode: "n2", Handoff: ho("n2", 5, 50), Local: 30}, dataRestore},
		{"planned, no copy here", dataCandidates{Self: "n3", LockIndex: 6, PrevNode: "n2", Handoff: ho("n2", 5, 50)}, dataRestore},
		// Issue 25: this node handed off generation 30 long ago; the
		// newest handoff is n2's (50): n3's own older copy must not win.
		{"own older copy vs a newer handoff", dataCandidates{Self: "n3", LockIndex: 6, PrevNode: "n2", Handoff: ho("n2", 5, 50), Local: 30}, dataRestore},
		{"own handoff, same generation", dataCandidates{Self: "n3", LockIndex: 6, PrevNode: "n3", Handoff: ho("n3", 5, 50), Local: 50}, dataKeep},
		{"own handoff, but an older copy here", dataCandidates{Self: "n3", LockIndex: 6, PrevNode: "n3", Handoff: ho("n3", 5, 50), Local: 30}, dataRestore},
		{"own handoff, no generation recorded (older mariposa)", dataCandidates{Self: "n3", LockIndex: 6, PrevNode: "n3", Handoff: ho("n3", 5, 50)}, dataKeep},
		// n1 could not restore n2's handoff and passed it on: the next
		// holder fetches from n2, and n1 itself keeps nothing of its own.
		{"forwarded to a third node", dataCandidates{Self: "n3", LockIndex: 8, PrevNode: "n1", Handoff: fw, Local: 30}, dataRestore},
		{"forwarded back to its forwarder", dataCandidates{Self: "n1", LockIndex: 8, PrevNode: "n1", Handoff: fw, Local: 30}, dataRestore},
		{"forwarded back to its source", dataCandidates{Self: "n2", LockIndex: 8, PrevNode: "n1", Handoff: fw, Local: 40}, dataKeep},
		{"forwarded back to its source, no generation", dataCandidates{Self: "n2", LockIndex: 8, PrevNode: "n1", Handoff: fw}, dataRestore},
		{"held last, lost without a handoff", dataCandidates{Self: "n1", LockIndex: 9, PrevNode: "n1", Handoff: ho("n2", 5, 50), Local: 60}, dataKeep},
		{"held last but never ready after a newer handoff", dataCandidates{Self: "n1", LockIndex: 9, PrevNode: "n1", Handoff: ho("n2", 5, 50), Local: 30}, dataUnplanned},
		{"held last, no handoff at all", dataCandidates{Self: "n1", LockIndex: 9, PrevNode: "n1", Local: 60}, dataKeep},
		{"another node lost without a handoff", dataCandidates{Self: "n1", LockIndex: 9, PrevNode: "n2", Handoff: ho("n1", 5, 50), Local: 50}, dataUnplanned},
		{"another node lost, no handoff", dataCandidates{Self: "n1", LockIndex: 9, PrevNode: "n2"}, dataUnplanned},
	} {
		if got, why := chooseData(tc.in); got != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

// A holder whose volumes were never ready (its restore failed: its
// instance never ran) passes the handoff it was to restore on, instead of
// handing off its own empty volume (issue 25); the node after it restores
// the original data from its first holder, and its restore record carries
// the acknowledgement the first holder waits for. A node that gets the
// slot back keeps its copy only when it is the handoff's generation.
func TestHandoffForwardedWhenNotReady(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	ctx := context.Background()
	a, b, n3 := newVolumeNode(t, c, "n1"), newVolumeNode(t, c, "n2"), newVolumeNode(t, c, "n3")

	ha := a.take(t, "")
	if _, _, err := a.f.prepareVolumes(ctx, ha); err != nil {
		t.Fatal(err)
	}
	ha.volumesReady = true
	if err := os.WriteFile(filepath.Join(a.store.Dir("db", 0, "data"), "rows"), []byte("acknowledged\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !a.f.release(ha, SlotReleased, "mariposa stopped", nil) {
		t.Fatal("the release did not say it serves a handoff")
	}
	first := readHandoffT(t, c)

	// n2 claims and gives the slot up before its volumes are ready (its
	// restore failed: its directory is there, empty).
	hb := b.take(t, "n1")
	if _, err := b.store.Ensure("db", 0, "data"); err != nil {
		t.Fatal(err)
	}
	if b.f.release(hb, SlotReleased, "rescheduled: volumes not ready", nil) {
		t.Fatal("a holder that was never ready says it serves a handoff")
	}
	fw := readHandoffT(t, c)
	if fw.Node != "n1" || fw.TermIndex != first.TermIndex || fw.LockIndex != hb.term.LockIndex || fw.ForwardedBy != "n2" ||
		fw.Volumes["data"] != first.Volumes["data"] {
		t.Fatalf("forwarded handoff %+v, want n1's %+v passed on by n2", fw, first)
	}

	// n3 restores n1's data and acknowledges it with its record.
	h3 := n3.take(t, "n2")
	note, ack, err := n3.f.prepareVolumes(ctx, h3)
	if err != nil || !strings.Contains(note, "restored the handoff") {
		t.Fatalf("restore: %q %v", note, err)
	}
	if got, _ := os.ReadFile(filepath.Join(n3.store.Dir("db", 0, "data"), "rows")); string(got) != "acknowledged\n" {
		t.Fatalf("restored %q", got)
	}
	if ok, _, _, err := c.Txn().Txn(ack, nil); err != nil || !ok {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if r := readHandoffT(t, c).Restored; r == nil || r.Node != "n3" || r.TermIndex != h3.term.Index {
		t.Fatalf("acknowledgement %+v", r)
	}
	if g, _ := n3.store.Generation("db", 0, "data"); g != h3.term.Index {
		t.Fatalf("generation %d, want the term's %d", g, h3.term.Index)
	}
}

// A snapshot hook that fails once the instance has stopped does not hold
// the data back: the stopped directory is handed off as it is, the
// handoff says the hook failed, and the next holder restores it without
// running restore (nothing of the hook's to load).
func TestHandoffHookFails(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	ctx := context.Background()
	a, b := newVolumeNode(t, c, "n1"), newVolumeNode(t, c, "n2")
	ha := a.take(t, "")
	ha.unit.Unit.Placement.Volumes[0].Snapshot = []string{"false"}
	ha.unit.Unit.Placement.Volumes[0].Restore = []string{"/bin/sh", "-c", "echo clobbered > rows"}
	if _, _, err := a.f.prepareVolumes(ctx, ha); err != nil {
		t.Fatal(err)
	}
	ha.volumesReady = true
	if err := os.WriteFile(filepath.Join(a.store.Dir("db", 0, "data"), "rows"), []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !a.f.release(ha, SlotReleased, "drained", nil) {
		t.Fatal("no handoff")
	}
	ho := readHandoffT(t, c)
	if ho.Node != "n1" || ho.HookFailed["data"] == "" || ho.Volumes["data"].Size == 0 {
		t.Fatalf("handoff %+v, want n1's stopped directory with the hook's failure", ho)
	}
	hb := b.take(t, "n1")
	hb.unit = ha.unit
	if _, _, err := b.f.prepareVolumes(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.store.Dir("db", 0, "data"), "rows")); string(got) != "kept\n" {
		t.Fatalf("restored %q", got)
	}
}

func readHandoffT(t *testing.T, c *api.Client) Handoff {
	t.Helper()
	p, _, err := c.KV().Get(HandoffKey("db", 0), nil)
	if err != nil || p == nil {
		t.Fatalf("no handoff: %v", err)
	}
	ho, err := DecodeHandoff(p.Value)
	if err != nil {
		t.Fatal(err)
	}
	return ho
}

// A stopping holder serves its handoff until the next holder acknowledges
// its restore; a wait cut short (a second signal) is recorded in the
// audit as a handoff no longer served, with the term it was of.
func TestAwaitRestore(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	ctx := context.Background()
	a, b := newVolumeNode(t, c, "n1"), newVolumeNode(t, c, "n2")
	ha := a.take(t, "")
	if _, _, err := a.f.prepareVolumes(ctx, ha); err != nil {
		t.Fatal(err)
	}
	ha.volumesReady = true
	if !a.f.release(ha, SlotReleased, "mariposa stopped", nil) {
		t.Fatal("no handoff")
	}

	// Cut short: recorded.
	cut, cancel := context.WithCancel(ctx)
	cancel()
	a.f.awaitRestores(cut, []*heldSlot{ha})
	var rec *AuditEvent
	recs, _, err := c.KV().List(AuditPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range recs {
		var e AuditEvent
		if json.Unmarshal(p.Value, &e) == nil && e.Action == "handoff-unserved" {
			rec = &e
		}
	}
	if rec == nil || rec.From != "n1" || rec.Slot != "db/0" || rec.TermIndex != ha.term.Index {
		t.Fatalf("the unserved handoff's record: %+v", rec)
	}

	// Acknowledged: the wait ends once the next holder's record is in.
	done := make(chan string, 1)
	go func() { done <- a.f.awaitRestore(ctx, ha) }()
	hb := b.take(t, "n1")
	_, ack, err := b.f.prepareVolumes(ctx, hb)
	if err != nil || len(ack) == 0 {
		t.Fatalf("restore: %v, ack %v", err, ack)
	}
	select {
	case why := <-done:
		t.Fatalf("stopped waiting before the acknowledgement: %q", why)
	case <-time.After(1500 * time.Millisecond):
	}
	if ok, _, _, err := c.Txn().Txn(ack, nil); err != nil || !ok {
		t.Fatalf("ack: %v %v", ok, err)
	}
	select {
	case why := <-done:
		if why != "" {
			t.Fatalf("the wait ended with %q, want the acknowledgement", why)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10s after the acknowledgement")
	}
}

// After an unplanned loss the newest copy wins by generation: a periodic
// copy taken during a term is older than the data as that term ended
// (this node's own, or a handoff), whatever the clocks say.
func TestNewestFirst(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 8, 46, 20, 0, time.UTC)
	for _, tc := range []struct {
		name string
		in   []dataCopy
		want string // From of the first
	}{
		// TestFleetVolumeFollowsSlot's case: this node's own data of
		// term 38 (it handed it off at 08:46:21) against a periodic copy
		// taken during term 38 a second earlier, which missed the last
		// writes.
		{"own end of term over a copy during it", []dataCopy{
			{Kind: copyPeriodic, From: "copy", Gen: 38, At: t0},
			{Kind: copyLocal, From: "local", Gen: 38, At: t0.Add(time.Second)}}, "local"},
		{"own end of term over a copy during it, even with no time known", []dataCopy{
			{Kind: copyPeriodic, From: "copy", Gen: 38, At: t0},
			{Kind: copyLocal, From: "local", Gen: 38}}, "local"},
		{"a copy of a later term over this node's own", []dataCopy{
			{Kind: copyLocal, From: "local", Gen: 38},
			{Kind: copyPeriodic, From: "copy", Gen: 54, At: t0}}, "copy"},
		{"a handoff of a later term over this node's own", []dataCopy{
			{Kind: copyLocal, From: "local", Gen: 38},
			{Kind: copyHandoff, From: "handoff", Gen: 54, At: t0}}, "handoff"},
		{"a handoff over a copy of the same term", []dataCopy{
			{Kind: copyPeriodic, From: "copy", Gen: 54, At: t0.Add(time.Minute)},
			{Kind: copyHandoff, From: "handoff", Gen: 54, At: t0}}, "handoff"},
		{"a copy of a later term over an older handoff", []dataCopy{
			{Kind: copyHandoff, From: "handoff", Gen: 38, At: t0.Add(time.Minute)},
			{Kind: copyPeriodic, From: "copy", Gen: 54, At: t0}}, "copy"},
		{"the newer of two copies of unknown generation", []dataCopy{
			{Kind: copyPeriodic, From: "old", At: t0},
			{Kind: copyPeriodic, From: "new", At: t0.Add(time.Minute)}}, "new"},
	} {
		newestFirst(tc.in)
		if tc.in[0].From != tc.want {
			t.Errorf("%s: %s first, want %s", tc.name, tc.in[0].From, tc.want)
		}
	}
}

// The snapshot hook of a periodic copy runs as the volumes' owner (a
// service's user), as a planned handoff's does (website/reference/
// resources.md: the snapshot and restore hooks run as it). Both engines
// push copies with PushCopies, which takes the owner.
//
// Mutation-checked: with cluster.Fleet's pushCopies passing no Owner (as
// it did), the hook runs as root and this fails.
func TestPeriodicCopyHookRunsAsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (a volume's owner)")
		}
		t.Skip("needs root (a volume's owner)")
	}
	c := consultest.NewDev(t).Client(t)
	ctx := context.Background()
	n := newVolumeNode(t, c, "n1")
	// The owner must reach the store (t.TempDir's parents are 0700).
	for d := filepath.Dir(n.store.Dir("db", 0, "data")); strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h := n.take(t, "")
	v := h.unit.Unit.Placement.Volumes[0]
	v.Replicas, v.Snapshot = 1, []string{"sh", "-c", "id -u > copy.uid"}
	h.unit.Services[0].User = "nobody"
	if _, _, err := n.f.prepareVolumes(ctx, h); err != nil {
		t.Fatal(err)
	}
	// No other node to take the copy: the push fails after the hook ran.
	if err := n.f.pushCopies(ctx, h, v); err == nil || !strings.Contains(err.Error(), "no peer") {
		t.Fatalf("push: %v, want no peer", err)
	}
	b, err := os.ReadFile(filepath.Join(n.store.Dir("db", 0, "data"), "copy.uid"))
	if err != nil || strings.TrimSpace(string(b)) != "65534" {
		t.Fatalf("the periodic copy's hook ran as uid %q (%v), want nobody's 65534", b, err)
	}
}
