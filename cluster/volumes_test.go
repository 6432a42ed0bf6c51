package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
)

func volumeUnit() UnitSpec {
	p := &schema.Placement{Count: 1, Exclusive: true, Volumes: []*schema.Volume{{Name: "data", Path: "data",
		Handoff: schema.HandoffSnapshot, OnMissing: schema.OnMissingLatest, RestoreTimeout: time.Minute, Interval: 5 * time.Minute}}}
	return UnitSpec{Unit: placement.Unit{Name: "db", Placement: p, HasVolume: true}, Services: []*schema.Service{{Name: "db", Placement: p}}}
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
	// n4's term (fencing index 521) restored n2's handoff and ran; then
	// its session went, deleting the slot key, whose LockIndex started
	// over: the next term's is again the handoff's plus one.
	consumed := ho("n2", 1, 221)
	consumed.Restored = &HandoffAck{Node: "n4", TermIndex: 521}
	for _, tc := range []struct {
		name string
		in   dataCandidates
		want dataChoice
	}{
		{"first holder", dataCandidates{Self: "n1", LockIndex: 1}, dataEmpty},
		// Simulator seed 323: not planned for a later term (on_missing),
		// however the lock indexes line up; planned still for the term
		// that acknowledged it (its restore again).
		{"restored by an earlier term, the key recreated since", dataCandidates{Self: "n3", LockIndex: 2, Term: 900, PrevNode: "n4", Handoff: consumed}, dataUnplanned},
		{"restored by this term", dataCandidates{Self: "n4", LockIndex: 2, Term: 521, PrevNode: "n2", Handoff: consumed}, dataRestore},
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
// resources.md: the snapshot and restore hooks run as it): PushCopies runs
// it as CopyPush.Owner, which fleet/executor sets to VolumeOwner's.
//
// Mutation-checked: with PushCopies not passing Owner to the hook (as an
// older periodic copy did), the hook runs as root and this fails.
func TestPeriodicCopyHookRunsAsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (a volume's owner)")
		}
		t.Skip("needs root (a volume's owner)")
	}
	c := consultest.NewDev(t).Client(t)
	ctx := context.Background()
	store, err := volume.Open(t.TempDir(), consultest.Logger(t, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	// The owner must reach the store (t.TempDir's parents are 0700).
	for d := filepath.Dir(store.Dir("db", 0, "data")); strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	u := volumeUnit()
	v := u.Unit.Placement.Volumes[0]
	v.Replicas, v.Snapshot = 1, []string{"sh", "-c", "id -u > copy.uid"}
	u.Services[0].User = "nobody"
	owner, err := VolumeOwner(u)
	if err != nil || owner == nil {
		t.Fatalf("VolumeOwner: %+v %v", owner, err)
	}
	live, err := store.Ensure("db", 0, v.Path)
	if err == nil {
		err = volume.Own(live, owner)
	}
	if err != nil {
		t.Fatal(err)
	}
	// No other node to take the copy: the push fails after the hook ran.
	err = PushCopies(ctx, CopyPush{Client: c, Store: store, Self: "n1", Unit: "db", K: 0, Volume: v,
		Key: SlotKey("db", 0), Session: "none", TermIndex: 1, Owner: owner, Log: consultest.Logger(t, "n1")})
	if err == nil || !strings.Contains(err.Error(), "no peer") {
		t.Fatalf("push: %v, want no peer", err)
	}
	b, err := os.ReadFile(filepath.Join(store.Dir("db", 0, "data"), "copy.uid"))
	if err != nil || strings.TrimSpace(string(b)) != "65534" {
		t.Fatalf("the periodic copy's hook ran as uid %q (%v), want nobody's 65534", b, err)
	}
}
