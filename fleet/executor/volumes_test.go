package executor_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
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
// acknowledges it in the handoff (cluster.Handoff.Restored), at the key
// cluster.Fleet uses.
func TestVolumeFollowsTheSlot(t *testing.T) {
	testVolumeFollows(t, agent.Faults{}, true)
}

// The check of the test above: released before its handoff, the data
// does not follow.
func TestVolumeFollowsTheSlotMutation(t *testing.T) {
	testVolumeFollows(t, agent.Faults{ReleaseBeforeHandoff: true}, false)
}

func testVolumeFollows(t *testing.T, faults agent.Faults, follows bool) {
	a := consultest.NewDev(t)
	c := a.Client(t)
	unit := agent.Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1, Volumes: true}
	spec := []*schema.Volume{{Name: "data", Path: "data", Handoff: schema.HandoffSnapshot, OnMissing: schema.OnMissingLatest, RestoreTimeout: time.Minute}}
	var runners []*dataRunner
	for i := range 2 {
		name := fmt.Sprintf("node%d", i)
		check := "mariposa-" + name + ":mariposa"
		if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: name, Address: "127.0.0.1",
			Service: &api.AgentService{ID: "mariposa-" + name, Service: "mariposa"},
			Check:   &api.AgentCheck{Node: name, CheckID: check, Name: "mariposa supervisor", ServiceID: "mariposa-" + name, Status: api.HealthPassing}}, nil); err != nil {
			t.Fatal(err)
		}
		store, err := volume.Open(t.TempDir(), consultest.Logger(t, name+"-volumes"))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(store.Handler(cluster.AuthorizeVolume(c)))
		t.Cleanup(srv.Close)
		r := &dataRunner{node: name, store: store, found: map[uint64]string{}}
		r.ex = executor.New(executor.Config{Client: c, Node: name, Checks: []string{check}, LockDelay: 3 * time.Second,
			Seed: uint64(i + 1), Instances: r, Log: consultest.Logger(t, name), Faults: executor.Faults{Agent: faults},
			Volumes: &executor.Volumes{Store: store, APIURL: srv.URL, Specs: func(string) []*schema.Volume { return spec }}})
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
	// One node runs the slot.
	var first, next *dataRunner
	var token uint64
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
	// It stops gracefully: its data goes with the slot.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := first.ex.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", first.node, err)
	}
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
	// The handoff, as cluster.Fleet reads it: from the first holder, its
	// term's generation, acknowledged by the next.
	var ho cluster.Handoff
	if !consultest.WaitFor(10*time.Second, func() bool {
		p, _, err := c.KV().Get(cluster.HandoffKey("db", 0), nil)
		if err != nil || p == nil {
			return false
		}
		ho, err = cluster.DecodeHandoff(p.Value)
		return err == nil && ho.Restored != nil
	}) {
		t.Fatalf("no acknowledged handoff: %+v", ho)
	}
	if ho.Node != first.node || ho.TermIndex != token || ho.Restored.Node != next.node {
		t.Fatalf("handoff %+v (restored %+v), want from %s at generation %d, restored by %s", ho, ho.Restored, first.node, token, next.node)
	}
}
