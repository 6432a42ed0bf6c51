package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// dataRunner is a node's instances of a unit with a volume: each appends
// its fencing token to a file in the volume as it starts, and notes what
// it found there.
type dataRunner struct {
	node  string
	store *volume.Store
	ex    *executor.Executor

	mu    sync.Mutex
	found map[uint64]string // by fencing token: the file as the instance found it
	notes map[uint64]string // by fencing token: how its volumes were readied (Start.Volumes)
}

func (r *dataRunner) file(s agent.SlotID) string {
	return filepath.Join(r.store.Dir(s.Unit, s.K, "data"), "log")
}

func (r *dataRunner) Start(s agent.Start) {
	b, _ := os.ReadFile(r.file(s.Slot))
	line := fmt.Sprintf("%s %d\n", r.node, s.Index)
	if err := os.WriteFile(r.file(s.Slot), append(b, line...), 0o644); err != nil {
		panic(err)
	}
	r.mu.Lock()
	r.found[s.Index] = string(b)
	if r.notes != nil {
		r.notes[s.Index] = s.Volumes
	}
	r.mu.Unlock()
	r.ex.InstanceStarted(s.Slot)
}

func (r *dataRunner) Stop(slot agent.SlotID, kill bool) { r.ex.InstanceExited(slot) }
func (r *dataRunner) Update(u agent.Update)             { r.ex.InstanceStarted(u.Slot) }

func (r *dataRunner) started() map[uint64]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[uint64]string{}
	for k, v := range r.found {
		out[k] = v
	}
	return out
}

// A holder that stops gracefully hands its data off; the next holder
// restores it before its instance starts, from the old node's API, and
// acknowledges it in the handoff (cluster.Handoff.Restored), at
// cluster.HandoffKey.
func TestVolumeFollowsTheSlot(t *testing.T) {
	testVolumeFollows(t, agent.Faults{}, true)
}

// The check of the test above: released before its handoff, the data
// does not follow.
func TestVolumeFollowsTheSlotMutation(t *testing.T) {
	testVolumeFollows(t, agent.Faults{ReleaseBeforeHandoff: true}, false)
}

// volumeFleet starts two executors (node0, node1) on a dev agent, each
// with its own volume store served by its own node API, running unit db
// (count 1, exclusive) with the volume spec.
func volumeFleet(t *testing.T, faults agent.Faults, spec []*schema.Volume) (*api.Client, []*dataRunner) {
	return volumeFleetWith(t, volumeOpts{faults: faults, spec: spec})
}

// volumeOpts: volumeFleetWith's fleet. copyEvery is the unit's
// (agent.Unit.CopyEvery); owner the volumes' (executor.Volumes.Owner),
// with which the stores' parents are made reachable by that user.
type volumeOpts struct {
	faults    agent.Faults
	spec      []*schema.Volume
	copyEvery time.Duration
	owner     *volume.RunAs
}

func volumeFleetWith(t *testing.T, o volumeOpts) (*api.Client, []*dataRunner) {
	a := consultest.NewDev(t)
	c := a.Client(t)
	unit := agent.Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1, Volumes: true, CopyEvery: o.copyEvery}
	var runners []*dataRunner
	for i := range 2 {
		name := fmt.Sprintf("node%d", i)
		dir := t.TempDir()
		if o.owner != nil {
			reachable(t, dir)
		}
		store, err := volume.Open(dir, consultest.Logger(t, name+"-volumes"))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(store.Handler(cluster.AuthorizeVolume(c)))
		t.Cleanup(srv.Close)
		// Its node API in the catalog, where a holder finds the nodes to
		// push its copies to (cluster.CopyPeers).
		registerNodeMeta(t, c, name, api.HealthPassing, map[string]string{checks.FleetMetaKey: checks.FleetMetaValue, supervisor.HTTPAPIMetaKey: srv.URL})
		r := &dataRunner{node: name, store: store, found: map[uint64]string{}, notes: map[uint64]string{}}
		r.ex = executor.New(executor.Config{Client: c, Node: name, Checks: []string{"mariposa-" + name + ":mariposa"}, LockDelay: 3 * time.Second,
			Seed: uint64(i + 1), Instances: r, Log: consultest.Logger(t, name), Faults: executor.Faults{Agent: o.faults},
			Volumes: &executor.Volumes{Store: store, APIURL: srv.URL, Specs: func(string) []*schema.Volume { return o.spec },
				Owner: func(string) (*volume.RunAs, error) { return o.owner, nil }}})
		runners = append(runners, r)
	}
	for _, r := range runners {
		r.ex.Start()
		r.ex.SetUnits([]agent.Unit{unit})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r.ex.Stop(ctx)
		})
	}
	return c, runners
}

// registerNode registers a fleet node with its liveness check (critical:
// Consul invalidates the sessions bound to it).
func registerNode(t *testing.T, c *api.Client, name, status string) {
	t.Helper()
	registerNodeMeta(t, c, name, status, nil)
}

// registerNodeMeta is registerNode with the mariposa service's meta.
func registerNodeMeta(t *testing.T, c *api.Client, name, status string, meta map[string]string) {
	t.Helper()
	check := "mariposa-" + name + ":mariposa"
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: name, Address: "127.0.0.1",
		Service: &api.AgentService{ID: "mariposa-" + name, Service: "mariposa", Meta: meta},
		Check:   &api.AgentCheck{Node: name, CheckID: check, Name: "mariposa supervisor", ServiceID: "mariposa-" + name, Status: status}}, nil); err != nil {
		t.Fatal(err)
	}
}

// running waits for a node to run db/0 and returns it, the other and the
// fencing token.
func running(t *testing.T, runners []*dataRunner) (first, next *dataRunner, token uint64) {
	t.Helper()
	if !consultest.WaitFor(30*time.Second, func() bool {
		for i, r := range runners {
			for tok := range r.started() {
				first, next, token = r, runners[1-i], tok
				return true
			}
		}
		return false
	}) {
		t.Fatal("no node started the slot")
	}
	return first, next, token
}

func testVolumeFollows(t *testing.T, faults agent.Faults, follows bool) {
	spec := []*schema.Volume{{Name: "data", Path: "data", Handoff: schema.HandoffSnapshot, OnMissing: schema.OnMissingLatest, RestoreTimeout: time.Minute}}
	c, runners := volumeFleet(t, faults, spec)
	first, next, token := running(t, runners)
	// It stops gracefully: its data goes with the slot, and its Stop
	// returns once the next holder has it (the caller's node API serves
	// it until then).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := first.ex.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", first.node, err)
	}
	p, _, err := c.KV().Get(cluster.HandoffKey("db", 0), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	var ho cluster.Handoff
	if p != nil {
		if ho, err = cluster.DecodeHandoff(p.Value); err != nil {
			t.Fatal(err)
		}
	}
	if acked := ho.Restored != nil; acked != follows {
		t.Fatalf("%s stopped with its handoff acknowledged: %v, want %v (%+v)", first.node, acked, follows, ho)
	}
	registerNode(t, c, first.node, api.HealthCritical) // its mariposa is gone
	var found string
	if !consultest.WaitFor(30*time.Second, func() bool {
		for _, f := range next.started() {
			found = f
			return true
		}
		return false
	}) {
		t.Fatalf("%s never started the slot", next.node)
	}
	want := fmt.Sprintf("%s %d\n", first.node, token)
	if got := found == want; got != follows {
		t.Fatalf("%s started with %q; want the data of %s's term (%q): %v", next.node, found, first.node, want, follows)
	}
	if !follows {
		return
	}
	// The handoff, as cluster.ChooseData reads it: from the first holder,
	// its term's generation, acknowledged by the next.
	if ho.Node != first.node || ho.TermIndex != token || ho.Restored.Node != next.node {
		t.Fatalf("handoff %+v (restored %+v), want from %s at generation %d, restored by %s", ho, ho.Restored, first.node, token, next.node)
	}
	// The restore's record names where the data came from (From: the
	// previous holder, website/operations.md).
	var rec cluster.AuditEvent
	for _, e := range audits(t, c) {
		if e.Action == "restore" && e.To == next.node {
			rec = e
		}
	}
	if rec.From != first.node {
		t.Fatalf("the restore record %+v, want from %s", rec, first.node)
	}
}

// A stop with no other fleet node live to take the data: it ends at once
// and records handoff-unserved (the data stays on the node).
//
// Mutation-checked: without the record (the executor ended silently, as
// it did) this fails.
func TestVolumeUnservedRecorded(t *testing.T) {
	spec := []*schema.Volume{{Name: "data", Path: "data", Handoff: schema.HandoffSnapshot, OnMissing: schema.OnMissingLatest, RestoreTimeout: time.Minute}}
	c, runners := volumeFleet(t, agent.Faults{}, spec)
	first, next, token := running(t, runners)
	next.ex.Kill()
	registerNode(t, c, next.node, api.HealthCritical)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := first.ex.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", first.node, err)
	}
	for _, e := range audits(t, c) {
		if e.Action == "handoff-unserved" && e.Node == first.node && e.TermIndex == token {
			return
		}
	}
	t.Fatalf("no handoff-unserved record of %s at generation %d: %+v", first.node, token, audits(t, c))
}

// A holder lost without a handoff (its mariposa killed, its session
// invalidated): the next holder applies on_missing: with "fail" its
// instance does not start, the slot is released; with "empty" it starts
// with nothing. (Before the executor read the slot's ClaimedKey, such a
// slot counted as never held and started empty whatever on_missing said.)
func TestVolumeLostWithoutHandoff(t *testing.T) {
	for _, onMissing := range []string{schema.OnMissingFail, schema.OnMissingEmpty} {
		t.Run(onMissing, func(t *testing.T) {
			spec := []*schema.Volume{{Name: "data", Path: "data", Handoff: schema.HandoffSnapshot, OnMissing: onMissing, RestoreTimeout: time.Minute}}
			c, runners := volumeFleet(t, agent.Faults{}, spec)
			first, next, _ := running(t, runners)
			first.ex.Kill()
			registerNode(t, c, first.node, api.HealthCritical)
			id := agent.SlotID{Unit: "db", K: 0}
			switch onMissing {
			case schema.OnMissingFail:
				// The next holder claims, fails its restore and releases.
				if !consultest.WaitFor(60*time.Second, func() bool {
					if len(next.started()) > 0 {
						return true // (fails below)
					}
					p, _, err := c.KV().Get(id.ReleasedKey(), &api.QueryOptions{RequireConsistent: true})
					return err == nil && p != nil
				}) {
					t.Fatal("the slot was never released by the next holder")
				}
				if got := next.started(); len(got) != 0 {
					t.Fatalf("%s started with on_missing = \"fail\": %v", next.node, got)
				}
				// The slot failed: its failed mark set
				// by the release, until mariposa reset.
				var mark cluster.FailedRecord
				if !consultest.WaitFor(30*time.Second, func() bool {
					p, _, err := c.KV().Get(cluster.FailedKey(id.Unit, id.K), &api.QueryOptions{RequireConsistent: true})
					return err == nil && p != nil && json.Unmarshal(p.Value, &mark) == nil
				}) {
					t.Fatal("the slot was released without its failed mark")
				}
				if mark.Node != next.node || !strings.Contains(mark.Reason, "on_missing is \"fail\"") {
					t.Fatalf("failed mark %+v, want %s's on_missing", mark, next.node)
				}
			default:
				if !consultest.WaitFor(60*time.Second, func() bool { return len(next.started()) > 0 }) {
					t.Fatalf("%s never started the slot", next.node)
				}
				for _, found := range next.started() {
					if found != "" {
						t.Fatalf("%s started with %q, want empty", next.node, found)
					}
				}
			}
		})
	}
}

// reachable makes dir and its temporary parents reachable by another user
// (t.TempDir's are 0700; a real store's parents are 0755).
func reachable(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (a volume's owner)")
		}
		t.Skip("needs root (a volume's owner)")
	}
	for d := dir; strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// The periodic copies (agent.PushCopies, volumes with replicas): while
// the holder runs, it pushes a copy of its volume to the other node every
// interval and records it at cluster.CopiesKey with its term as the
// generation. Lost without a handoff (killed, its session invalidated),
// the next holder restores the newest copy (on_missing = "latest"), so
// it starts with what the holder wrote while running, up to that copy;
// the restore's record and the instance's Start say which copy it was.
//
// Mutation-checked: with the executor's on_missing = "latest" as it was
// (this node's copy or the last handoff's, never a periodic copy), the
// next holder starts with nothing and this fails; with the agent's
// CopyEvery ignored (no PushCopies), no copy is ever recorded.
func TestVolumePeriodicCopyRestoredAfterLoss(t *testing.T) {
	spec := []*schema.Volume{{Name: "data", Path: "data", Handoff: schema.HandoffSnapshot, OnMissing: schema.OnMissingLatest,
		Replicas: 1, Interval: 300 * time.Millisecond, RestoreTimeout: time.Minute}}
	c, runners := volumeFleetWith(t, volumeOpts{spec: spec, copyEvery: 300 * time.Millisecond})
	first, next, token := running(t, runners)
	id := agent.SlotID{Unit: "db", K: 0}
	// Written while it runs: only a copy taken since carries it.
	wrote := time.Now()
	f, err := os.OpenFile(first.file(id), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("while running\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var copies []cluster.VolumeCopy
	if !consultest.WaitFor(30*time.Second, func() bool {
		p, _, err := c.KV().Get(cluster.CopiesKey("db", 0, "data"), &api.QueryOptions{RequireConsistent: true})
		if err != nil || p == nil {
			return false
		}
		copies, err = cluster.DecodeCopies(p.Value)
		return err == nil && len(copies) == 1 && copies[0].TakenAt.After(wrote)
	}) {
		t.Fatalf("no copy of the volume recorded after the write: %+v", copies)
	}
	if cp := copies[0]; cp.Node != next.node || cp.TermIndex != token {
		t.Fatalf("copy %+v, want on %s at generation %d", cp, next.node, token)
	}
	first.ex.Kill()
	registerNode(t, c, first.node, api.HealthCritical)
	var found, note string
	if !consultest.WaitFor(60*time.Second, func() bool {
		next.mu.Lock()
		defer next.mu.Unlock()
		for tok, f := range next.found {
			found, note = f, next.notes[tok]
			return true
		}
		return false
	}) {
		t.Fatalf("%s never started the slot", next.node)
	}
	want := fmt.Sprintf("%s %d\nwhile running\n", first.node, token)
	if found != want {
		t.Fatalf("%s started with %q, want the newest copy's %q", next.node, found, want)
	}
	if !strings.Contains(note, "restored from the copy of") {
		t.Fatalf("the start's volumes note: %q", note)
	}
	if !consultest.WaitFor(10*time.Second, func() bool {
		for _, e := range audits(t, c) {
			if e.Action == "restore" && e.To == next.node && e.Reason == note {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no restore record saying %q", note)
	}
}

// audits are the audit records, oldest first.
func audits(t *testing.T, c *api.Client) []cluster.AuditEvent {
	t.Helper()
	ps, _, err := c.KV().List(cluster.AuditPrefix, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []cluster.AuditEvent
	for _, p := range ps {
		var e cluster.AuditEvent
		if json.Unmarshal(p.Value, &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// The volumes' owner (executor.Volumes.Owner, cluster.VolumeOwner: a
// service's user): the volume's directory is the
// user's, and the snapshot and restore hooks run as it. The data moves in
// a graceful stop; on the next holder, the file the snapshot hook wrote
// and the one the restore hook wrote both say uid 65534, and the restored
// directory is 65534's.
//
// Mutation-checked: without Owner (hooks as mariposa's user) this fails.
func TestVolumeOwner(t *testing.T) {
	nobody := &volume.RunAs{Uid: 65534, Gid: 65534}
	spec := []*schema.Volume{{Name: "data", Path: "data", Handoff: schema.HandoffSnapshot, OnMissing: schema.OnMissingLatest, RestoreTimeout: time.Minute,
		Snapshot: []string{"sh", "-c", "id -u > snapshot.uid"}, Restore: []string{"sh", "-c", "id -u > restore.uid"}}}
	_, runners := volumeFleetWith(t, volumeOpts{spec: spec, owner: nobody})
	first, next, _ := running(t, runners)
	id := agent.SlotID{Unit: "db", K: 0}
	owner := func(p string) uint32 {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Uid
	}
	dir := filepath.Dir(first.file(id))
	if u := owner(dir); u != nobody.Uid {
		t.Fatalf("%s's volume is uid %d's, want %d", first.node, u, nobody.Uid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := first.ex.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", first.node, err)
	}
	if !consultest.WaitFor(30*time.Second, func() bool { return len(next.started()) > 0 }) {
		t.Fatalf("%s never started the slot", next.node)
	}
	dir = filepath.Dir(next.file(id))
	for _, f := range []string{"snapshot.uid", "restore.uid"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || strings.TrimSpace(string(b)) != "65534" {
			t.Errorf("%s on %s: %q %v, want the hook run as 65534", f, next.node, b, err)
		}
	}
	if u := owner(dir); u != nobody.Uid {
		t.Errorf("%s's restored volume is uid %d's, want %d", next.node, u, nobody.Uid)
	}
}
