package command

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

func TestFleetEngine(t *testing.T) {
	for _, tc := range []struct {
		env, want, err string
	}{
		{"", "", ""},
		{"fleet", "", ""},
		{"agent", "agent", ""},
		{"Agent", "", `MARIPOSA_FLEET_ENGINE="Agent"`},
		{"raft", "", `MARIPOSA_FLEET_ENGINE="raft"`},
	} {
		t.Setenv(fleetEngineEnv, tc.env)
		got, err := fleetEngine()
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %q, %v; want %q, error with %q", tc.env, got, err, tc.want, tc.err)
		}
	}
}

func TestAgentUnits(t *testing.T) {
	units := map[string]cluster.UnitSpec{
		"web":  {Unit: cluster.Unit{Name: "web", Placement: &schema.Placement{Count: 3, MaxPerNode: 1}}},
		"db":   {Unit: cluster.Unit{Name: "db", Placement: &schema.Placement{Count: 1, Exclusive: true}}},
		"none": {Unit: cluster.Unit{Name: "none"}},
	}
	want := []agent.Unit{{Name: "db", Count: 1, Exclusive: true}, {Name: "web", Count: 3, MaxPerNode: 1}}
	if got := agentUnits(units); !slices.Equal(got, want) {
		t.Errorf("agentUnits: %+v, want %+v", got, want)
	}
}

// fakeExec records what agentFleet tells the executor.
type fakeExec struct {
	mu     sync.Mutex
	events []string
	units  [][]agent.Unit
}

func (f *fakeExec) add(s string) { f.mu.Lock(); f.events = append(f.events, s); f.mu.Unlock() }
func (f *fakeExec) SetUnits(u []agent.Unit) {
	f.mu.Lock()
	f.units = append(f.units, u)
	f.mu.Unlock()
}
func (f *fakeExec) InstanceStarted(s agent.SlotID) { f.add("started " + s.String()) }
func (f *fakeExec) InstanceExited(s agent.SlotID)  { f.add("exited " + s.String()) }
func (f *fakeExec) Stop(context.Context) error     { f.add("stop"); return nil }
func (f *fakeExec) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// agentFleet hands the runner each held slot's instances with the slot's
// fencing token and session, reports a start once the runner has them and
// an exit only once the runner has stopped them; a kill closes the
// exclusive hold's channels at once (the supervisor's SIGKILL), before
// any apply; after the runner has stopped, a stop is an exit at once.
func TestAgentFleetInstances(t *testing.T) {
	var mu sync.Mutex
	var applied [][]supervisor.SlotInstance
	gate := make(chan struct{}, 16)
	apply := func(ctx context.Context, out []supervisor.SlotInstance) (supervisor.ApplyResult, error) {
		<-gate
		mu.Lock()
		applied = append(applied, out)
		mu.Unlock()
		return supervisor.ApplyResult{}, nil
	}
	ex := &fakeExec{}
	a := newAgentFleet(apply, hclog.NewNullLogger())
	a.ex = ex
	svcA, svcB := &schema.Service{Name: "db-a"}, &schema.Service{Name: "db-b"}
	a.units = map[string]cluster.UnitSpec{"db": {Unit: cluster.Unit{Name: "db", Placement: &schema.Placement{Count: 2, Exclusive: true}},
		Services: []*schema.Service{svcA, svcB}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.applyLoop(ctx)

	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; events %v", what, ex.seen())
			}
			time.Sleep(time.Millisecond)
		}
	}
	slot := agent.SlotID{Unit: "db", K: 1}
	a.Start(agent.Start{Slot: slot, Index: 42, Session: "s1"})
	if got := ex.seen(); len(got) != 0 {
		t.Fatalf("reported before the runner had the slot: %v", got)
	}
	gate <- struct{}{}
	wait("the start reported", func() bool { return slices.Equal(ex.seen(), []string{"started db/1"}) })
	mu.Lock()
	last := applied[len(applied)-1]
	mu.Unlock()
	if len(last) != 2 || last[0].Service != svcA || last[1].Service != svcB {
		t.Fatalf("applied %+v", last)
	}
	sl := last[0].Slot
	if sl.Unit != "db" || sl.Index != 1 || sl.Key != "mariposa/slots/db/1" || sl.Term != 42 || sl.Session != "s1" || sl.Lost == nil || sl.Expired == nil {
		t.Fatalf("slot %+v", sl)
	}

	// A kill: the channels close at once; the exit waits for the apply.
	a.Stop(slot, true)
	for _, c := range []<-chan struct{}{sl.Lost, sl.Expired} {
		select {
		case <-c:
		default:
			t.Fatal("a kill left the exclusive hold's channels open")
		}
	}
	time.Sleep(20 * time.Millisecond)
	if got := ex.seen(); len(got) != 1 {
		t.Fatalf("the exit reported before the runner stopped the instance: %v", got)
	}
	gate <- struct{}{}
	wait("the exit reported", func() bool { return slices.Equal(ex.seen(), []string{"started db/1", "exited db/1"}) })
	mu.Lock()
	last = applied[len(applied)-1]
	mu.Unlock()
	if len(last) != 0 {
		t.Fatalf("applied after the stop: %+v", last)
	}

	// Stopping: no start, and once the runner has stopped every instance a
	// stop is an exit at once, then the executor's graceful stop.
	a.Start(agent.Start{Slot: agent.SlotID{Unit: "db", K: 0}, Index: 50, Session: "s1"})
	gate <- struct{}{}
	wait("the second start", func() bool { return len(ex.seen()) == 3 })
	a.halt()
	a.Stop(agent.SlotID{Unit: "db", K: 0}, false)
	a.release(context.Background())
	want := []string{"started db/1", "exited db/1", "started db/0", "exited db/0", "stop"}
	if got := ex.seen(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if len(ex.units) != 1 || ex.units[0] != nil {
		t.Fatalf("units told %v, want none at the halt", ex.units)
	}
	a.Stop(agent.SlotID{Unit: "db", K: 1}, false)
	if got := ex.seen(); got[len(got)-1] != "exited db/1" {
		t.Fatalf("a stop after the runner stopped: %v", got)
	}
}
