package command

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/volume"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// MARIPOSA_FLEET_ENGINE=fleet chose an engine since removed: run
// -cluster runs the step machine whatever it says, and says so in its log
// whenever it is set, never silently. Mutation check: with
// fleetEngineWarning returning "" for "fleet", the "fleet" row fails.
func TestFleetEngineWarning(t *testing.T) {
	for _, tc := range []struct {
		env, want string
	}{
		{"", ""},
		{"fleet", `MARIPOSA_FLEET_ENGINE=fleet: the cluster.Fleet engine was removed; running the fleet's step machine`},
		{"agent", `MARIPOSA_FLEET_ENGINE="agent" is no longer read`},
		{"raft", `MARIPOSA_FLEET_ENGINE="raft" is no longer read`},
	} {
		t.Setenv(fleetEngineEnv, tc.env)
		got := fleetEngineWarning()
		if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.env, got, tc.want)
		}
	}
}

// agentUnits gives the step machine each unit's whole placement
// (agent.UnitOf: the placement block, resources, stickiness, max_per_node
// defaulted), what its services do on exhausted restarts
// (agent.OnExhausted) and Volumes for any volume, as before. Mutation
// checks: back to Count/Exclusive/MaxPerNode alone, the "web" and "kv"
// rows fail (no Placement, Resources, Sticky); without OnExhausted, "job"
// and "grp" fail; with UnitOf's Volumes (snapshot handoffs only), "kv"
// fails.
func TestAgentUnits(t *testing.T) {
	webP := &schema.Placement{Count: 3, MaxPerNode: 1, Constraints: []*schema.Constraint{{Attribute: "${node.datacenter}", Value: "dc1"}}}
	dbP := &schema.Placement{Count: 1, Exclusive: true}
	kvP := &schema.Placement{Count: 1, Exclusive: true, Volumes: []*schema.Volume{{Name: "data", Path: "data", Handoff: schema.HandoffSticky}}}
	jobP := &schema.Placement{Count: 2}
	grpP := &schema.Placement{Count: 1}
	units := map[string]cluster.UnitSpec{
		"web":  {Unit: placement.Unit{Name: "web", Placement: webP, Resources: placement.Reservation{CPU: 500, Memory: 256}}},
		"db":   {Unit: placement.Unit{Name: "db", Placement: dbP}},
		"none": {Unit: placement.Unit{Name: "none"}},
		"kv":   {Unit: placement.Unit{Name: "kv", Placement: kvP, HasVolume: true}},
		"job": {Unit: placement.Unit{Name: "job", Placement: jobP},
			Services: []*schema.Service{{Name: "job", Restart: schema.Restart{OnExhausted: "reschedule"}}}},
		"grp": {Unit: placement.Unit{Name: "grp", Placement: grpP}, Services: []*schema.Service{{Name: "a"}, {Name: "b"}}},
	}
	dm := schema.DefaultMaxPerNode
	want := []agent.Unit{
		{Name: "db", Count: 1, Exclusive: true, MaxPerNode: dm, Placement: dbP},
		{Name: "grp", Count: 1, MaxPerNode: dm, Placement: grpP, Group: true, Services: "a b"},
		{Name: "job", Count: 2, MaxPerNode: dm, Placement: jobP, Reschedule: true, Services: "job"},
		{Name: "kv", Count: 1, Exclusive: true, MaxPerNode: dm, Volumes: true, Placement: kvP, Sticky: true},
		{Name: "web", Count: 3, MaxPerNode: 1, Placement: webP, Resources: placement.Reservation{CPU: 500, Memory: 256}},
	}
	got := agentUnits(units)
	if len(got) != len(want) {
		t.Fatalf("agentUnits: %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("agentUnits[%d]: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// fakeExec records what agentFleet tells the executor.
type fakeExec struct {
	mu     sync.Mutex
	events []string
	units  [][]agent.Unit
	// stats, wait and first are what Stats, Waiting and FirstLive say.
	stats cluster.FleetStats
	wait  string
	first bool
}

func (f *fakeExec) ServiceFailed(s agent.SlotID, service, reason string) {
	f.add("failed " + s.String() + " " + service + ": " + reason)
}
func (f *fakeExec) Stats() cluster.FleetStats { return f.stats }
func (f *fakeExec) Waiting() string           { return f.wait }
func (f *fakeExec) FirstLive() bool           { return f.first }

func (f *fakeExec) add(s string) { f.mu.Lock(); f.events = append(f.events, s); f.mu.Unlock() }
func (f *fakeExec) SetUnits(u []agent.Unit) {
	f.mu.Lock()
	f.units = append(f.units, u)
	f.mu.Unlock()
}
func (f *fakeExec) InstanceStarted(s agent.SlotID) { f.add("started " + s.String()) }
func (f *fakeExec) InstanceExited(s agent.SlotID)  { f.add("exited " + s.String()) }
func (f *fakeExec) InstanceHealthy(s agent.SlotID, v string, since time.Time) {
	f.add("healthy " + s.String() + " " + v + " " + since.UTC().Format(time.RFC3339))
}
func (f *fakeExec) InstanceUnhealthy(s agent.SlotID, v string) {
	f.add("unhealthy " + s.String() + " " + v)
}
func (f *fakeExec) Stop(context.Context) error { f.add("stop"); return nil }
func (f *fakeExec) Halt()                      { f.add("halt") }

// waitFor waits for cond (5 s at most), or fails naming what and the
// events seen.
func (f *fakeExec) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !consultest.WaitFor(5*time.Second, cond) {
		t.Fatalf("timed out waiting for %s; events %v", what, f.seen())
	}
}

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
	var entered atomic.Int32 // applies begun (each then waits at the gate)
	apply := func(ctx context.Context, out []supervisor.SlotInstance) (supervisor.ApplyResult, error) {
		entered.Add(1)
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
	a.units = map[string]cluster.UnitSpec{"db": {Unit: placement.Unit{Name: "db", Placement: &schema.Placement{Count: 2, Exclusive: true}},
		Services: []*schema.Service{svcA, svcB}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.applyLoop(ctx)

	wait := func(what string, cond func() bool) { t.Helper(); ex.waitFor(t, what, cond) }
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
	begun := entered.Load()
	a.Stop(slot, true)
	for _, c := range []<-chan struct{}{sl.Lost, sl.Expired} {
		select {
		case <-c:
		default:
			t.Fatal("a kill left the exclusive hold's channels open")
		}
	}
	// The apply of the stop has begun and waits at the gate: an exit
	// reported now would be one before the runner stopped the instance.
	wait("the stop's apply", func() bool { return entered.Load() > begun })
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
	want := []string{"started db/1", "exited db/1", "started db/0", "halt", "exited db/0", "stop"}
	if got := ex.seen(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if len(ex.units) != 0 {
		t.Fatalf("units told %v at the halt, want none: Halt (a release there says \"mariposa stopped\")", ex.units)
	}
	a.Stop(agent.SlotID{Unit: "db", K: 1}, false)
	if got := ex.seen(); got[len(got)-1] != "exited db/1" {
		t.Fatalf("a stop after the runner stopped: %v", got)
	}
}

// agentFleet runs a held slot at its version's definition, read once per
// version (cluster.ReadUnitAt), not the unit's current one ("" is the
// current one); an update hands the runner the new version's definition
// and reports the start only then; the health loop reports the slot
// healthy at its version once the runner's snapshots say so, with when
// the checks passed where mariposa runs them.
func TestAgentFleetVersions(t *testing.T) {
	var mu sync.Mutex
	var applied [][]supervisor.SlotInstance
	apply := func(ctx context.Context, out []supervisor.SlotInstance) (supervisor.ApplyResult, error) {
		mu.Lock()
		applied = append(applied, out)
		mu.Unlock()
		return supervisor.ApplyResult{}, nil
	}
	ex := &fakeExec{}
	a := newAgentFleet(apply, hclog.NewNullLogger())
	a.ex = ex
	def := func(cmd string) cluster.UnitSpec {
		return cluster.UnitSpec{Unit: placement.Unit{Name: "web", Placement: &schema.Placement{Count: 2}},
			Services: []*schema.Service{{Name: "web", Command: []string{cmd}}}}
	}
	a.units = map[string]cluster.UnitSpec{"web": def("current")}
	reads := map[string]int{}
	a.readUnit = func(version, unit string) (cluster.UnitSpec, error) {
		mu.Lock()
		reads[version]++
		mu.Unlock()
		return def(version), nil
	}
	passed := time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	var snaps []supervisor.Snapshot
	var looks atomic.Int32 // the health loop's reads of the snapshots
	a.snapshots = func() []supervisor.Snapshot {
		looks.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(snaps)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.applyLoop(ctx)
	go a.healthLoop(ctx)
	wait := func(what string, cond func() bool) { t.Helper(); ex.waitFor(t, what, cond) }
	cmds := func() map[int]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[int]string{}
		if len(applied) > 0 {
			for _, si := range applied[len(applied)-1] {
				out[si.Slot.Index] = si.Service.Command[0]
			}
		}
		return out
	}
	s0, s1 := agent.SlotID{Unit: "web", K: 0}, agent.SlotID{Unit: "web", K: 1}
	a.Start(agent.Start{Slot: s0, Index: 7, Session: "s", Version: "web/2"})
	a.Start(agent.Start{Slot: s1, Index: 8, Session: "s"})
	wait("both started", func() bool { return len(ex.seen()) == 2 })
	if got := cmds(); got[0] != "web/2" || got[1] != "current" {
		t.Fatalf("ran %v, want slot 0 at web/2's definition, slot 1 at the current one", got)
	}
	// A new current definition moves no slot at a version.
	a.mu.Lock()
	a.units = map[string]cluster.UnitSpec{"web": def("newer")}
	a.mu.Unlock()
	a.Update(agent.Update{Slot: s0, Index: 7, Session: "s", From: "web/2", To: "web/3"})
	wait("the update started", func() bool { return slices.Contains(ex.seen(), "started web/0") && len(ex.seen()) == 3 })
	if got := cmds(); got[0] != "web/3" {
		t.Fatalf("ran %v after the update, want slot 0 at web/3", got)
	}
	a.Start(agent.Start{Slot: agent.SlotID{Unit: "web", K: 2}, Index: 9, Session: "s", Version: "web/3"})
	wait("slot 2 started", func() bool { return len(ex.seen()) == 4 })
	mu.Lock()
	if reads["web/3"] != 1 || reads["web/2"] != 1 {
		t.Errorf("reads %v, want one per version", reads)
	}
	snaps = []supervisor.Snapshot{{Service: "web", Slot: "web/0", State: supervisor.StateRunning, ChecksPassing: true,
		LocalChecks: true, LocalPassingSince: passed}, {Service: "web", Slot: "web/1", State: supervisor.StateRunning, ChecksPassing: true}}
	mu.Unlock()
	wait("slot 0 and 1 healthy", func() bool {
		ev := ex.seen()
		return slices.Contains(ev, "healthy web/0 web/3 "+passed.Format(time.RFC3339)) &&
			slices.Contains(ev, "healthy web/1  0001-01-01T00:00:00Z")
	})
	// Three more looks of the health loop (slot 2 is not healthy, so it
	// goes on looking): none may report a slot and version again.
	from := looks.Load()
	wait("three more looks", func() bool { return looks.Load() >= from+3 })
	n := 0
	for _, e := range ex.seen() {
		if strings.HasPrefix(e, "healthy ") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("events %v: want one healthy per slot and version (slot 2 not running)", ex.seen())
	}
}

func TestAgentHealthy(t *testing.T) {
	since := time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	unit := func(mode string, names ...string) cluster.UnitSpec {
		u := cluster.UnitSpec{Unit: placement.Unit{Name: "u", Placement: &schema.Placement{Count: 1, Update: schema.Update{HealthCheck: mode}}}}
		for _, n := range names {
			u.Services = append(u.Services, &schema.Service{Name: n})
		}
		return u
	}
	run := supervisor.Snapshot{Service: "a", Slot: "u/0", State: supervisor.StateRunning, ChecksPassing: true}
	local := run
	local.LocalChecks, local.LocalPassingSince = true, since
	for _, tc := range []struct {
		name  string
		u     cluster.UnitSpec
		snaps []supervisor.Snapshot
		ok    bool
		since time.Time
	}{
		{"not started", unit("checks", "a"), nil, false, time.Time{}},
		{"another slot", unit("checks", "a"), []supervisor.Snapshot{{Service: "a", Slot: "u/1", State: supervisor.StateRunning, ChecksPassing: true}}, false, time.Time{}},
		{"passing, catalog checks", unit("", "a"), []supervisor.Snapshot{run}, true, time.Time{}},
		{"checks failing", unit("checks", "a"), []supervisor.Snapshot{{Service: "a", Slot: "u/0", State: supervisor.StateRunning}}, false, time.Time{}},
		{"backoff", unit("checks", "a"), []supervisor.Snapshot{{Service: "a", Slot: "u/0", State: supervisor.StateBackoff, ChecksPassing: true}}, false, time.Time{}},
		{"local checks", unit("checks", "a"), []supervisor.Snapshot{local}, true, since},
		{"local not passing yet", unit("checks", "a"), []supervisor.Snapshot{{Service: "a", Slot: "u/0", State: supervisor.StateRunning, ChecksPassing: true, LocalChecks: true}}, false, time.Time{}},
		{"running mode ignores checks", unit("running", "a"), []supervisor.Snapshot{{Service: "a", Slot: "u/0", State: supervisor.StateRunning}}, true, time.Time{}},
		{"manual: running (and marked: markedLocked)", unit("manual", "a"), []supervisor.Snapshot{{Service: "a", Slot: "u/0", State: supervisor.StateRunning}}, true, time.Time{}},
		{"manual: not running", unit("manual", "a"), []supervisor.Snapshot{{Service: "a", Slot: "u/0", State: supervisor.StateBackoff}}, false, time.Time{}},
		{"a member missing", unit("checks", "a", "b"), []supervisor.Snapshot{run}, false, time.Time{}},
		{"one member without local checks", unit("checks", "a", "b"), []supervisor.Snapshot{local, {Service: "b", Slot: "u/0", State: supervisor.StateRunning, ChecksPassing: true}}, true, time.Time{}},
	} {
		ok, got := agentHealthy(tc.snaps, "u/0", tc.u)
		if ok != tc.ok || !got.Equal(tc.since) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, ok, got, tc.ok, tc.since)
		}
	}
}

// A slot of a unit with volumes runs with its directory in the node's
// volume store (MARIPOSA_VOLUME_<NAME> derives from it); without a store
// it is not handed to the runner; volumeSpecs gives the executor the
// unit's volume blocks.
func TestAgentFleetVolumeDir(t *testing.T) {
	vol := &schema.Volume{Name: "data", Path: "data"}
	units := map[string]cluster.UnitSpec{"kv": {Unit: placement.Unit{Name: "kv", Placement: &schema.Placement{Count: 1, Exclusive: true,
		Volumes: []*schema.Volume{vol}}}, Services: []*schema.Service{{Name: "kv"}}}}
	for _, store := range []*volume.Store{nil, {Root: "/var/lib/m"}} {
		a := newAgentFleet(nil, hclog.NewNullLogger())
		a.units, a.volumes = units, store
		a.Start(agent.Start{Slot: agent.SlotID{Unit: "kv", K: 0}, Index: 5, Session: "s"})
		out, in := a.desiredLocked()
		if store == nil {
			if len(out) != 0 || len(in) != 0 {
				t.Errorf("without a store: handed %+v", out)
			}
			continue
		}
		if len(out) != 1 || out[0].Slot.VolumeDir != "/var/lib/m/kv/0" || len(in) != 1 {
			t.Errorf("handed %+v, want kv/0 with its volume directory", out)
		}
		if got := a.volumeSpecs("kv"); len(got) != 1 || got[0] != vol {
			t.Errorf("volumeSpecs: %v", got)
		}
	}
}

// A held slot's instance that failed for good goes to the executor
// (ServiceFailed) when its unit reschedules or is a group; a plain unit's failure, another event, an
// event of a slot not held or of no slot do not. Mutation checks: with
// fleetMember.event not calling agentFleet.event, or agentFleet.event
// without its ServiceFailed, "job" and "grp" are not told (fails); without
// the OnExhausted filter, "plain" is told (fails).
func TestAgentFleetEventFailed(t *testing.T) {
	ex := &fakeExec{}
	a := newAgentFleet(nil, hclog.NewNullLogger())
	a.ex = ex
	defs := map[string]cluster.UnitSpec{
		"job": {Unit: placement.Unit{Name: "job", Placement: &schema.Placement{Count: 1}},
			Services: []*schema.Service{{Name: "job", Restart: schema.Restart{OnExhausted: "reschedule"}}}},
		"grp":   {Unit: placement.Unit{Name: "grp", Placement: &schema.Placement{Count: 1}}, Services: []*schema.Service{{Name: "a"}, {Name: "b"}}},
		"plain": {Unit: placement.Unit{Name: "plain", Placement: &schema.Placement{Count: 1}}, Services: []*schema.Service{{Name: "plain"}}},
	}
	for name, u := range defs {
		u := u
		a.held[agent.SlotID{Unit: name, K: 0}] = &agentSlot{def: &u}
	}
	m := &fleetMember{}
	m.ag.Store(a)
	for _, e := range []supervisor.Event{
		{Kind: supervisor.EventFailed, Slot: "job/0", Service: "job", Reason: "restarts exhausted"},
		{Kind: supervisor.EventFailed, Slot: "grp/0", Service: "b", Reason: "restarts exhausted"},
		{Kind: supervisor.EventFailed, Slot: "plain/0", Service: "plain", Reason: "restarts exhausted"},
		{Kind: supervisor.EventExited, Slot: "job/0", Service: "job", Reason: "exit 1"},
		{Kind: supervisor.EventFailed, Slot: "job/1", Service: "job", Reason: "not held"},
		{Kind: supervisor.EventFailed, Service: "job", Reason: "no slot"},
	} {
		m.event(e)
	}
	want := []string{"failed job/0 job: restarts exhausted", "failed grp/0 b: restarts exhausted"}
	if got := ex.seen(); !slices.Equal(got, want) {
		t.Fatalf("told %v, want %v", got, want)
	}
}

// Under the step machine the metrics read the executor's Stats, the
// liveness check its Waiting lines after the slots run, and the audit's
// retention its FirstLive. Mutation checks: fleetMember.stats not
// reading the step machine gives false (fails); waiting without the
// executor's lines (fails).
func TestAgentFleetStatsWaiting(t *testing.T) {
	m := &fleetMember{}
	if _, ok := m.stats(); ok {
		t.Fatal("stats before the step machine runs")
	}
	ex := &fakeExec{stats: cluster.FleetStats{Node: "n1", Ready: true, LiveNodes: 3}, wait: "slot api/2 free; rank 2, claiming in 400ms", first: true}
	a := newAgentFleet(nil, hclog.NewNullLogger())
	a.ex = ex
	a.held[agent.SlotID{Unit: "db", K: 0}] = &agentSlot{}
	m.ag.Store(a)
	if st, ok := m.stats(); !ok || st.Node != "n1" || !st.Ready || st.LiveNodes != 3 {
		t.Errorf("stats %+v, %v; want the executor's", st, ok)
	}
	want := "fleet engine: step machine; running slots db/0\nslot api/2 free; rank 2, claiming in 400ms"
	if got := m.waiting(); got != want {
		t.Errorf("waiting %q, want %q", got, want)
	}
	ex.wait = ""
	if got := m.waiting(); got != "fleet engine: step machine; running slots db/0" {
		t.Errorf("waiting with nothing to wait for: %q", got)
	}
}

// What the health loop tells the executor after each look at a slot
// (nextHealth): healthy once, a break or a restart within the looks, a
// later pass where the checks run; min_healthy_time's streak is the step
// machine's (fleet/agent's TestMinHealthyIsContinuous).
//
// Mutation-checked: with a healthy slot's break not told (the loop
// stopping at the first healthy report, as before), the break and
// restart rows fail.
func TestNextHealth(t *testing.T) {
	now := time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	local := now.Add(-100 * time.Millisecond)
	healthy := slotHealth{healthy: true, since: local, pids: []int{7}, until: now.Add(3 * time.Second)}
	for _, tc := range []struct {
		name  string
		s     slotHealth
		ok    bool
		pids  []int
		local time.Time
		say   string
		want  slotHealth
	}{
		{"not healthy yet: nothing", slotHealth{}, false, nil, time.Time{}, "", slotHealth{}},
		{"healthy: told, looks go on for min_healthy_time and the margin", slotHealth{}, true, []int{7}, local, "healthy",
			slotHealth{healthy: true, since: local, pids: []int{7}, until: now.Add(time.Second + healthMargin)}},
		{"still healthy: nothing", healthy, true, []int{7}, local, "", healthy},
		{"a break: told", healthy, false, nil, time.Time{}, "unhealthy", slotHealth{}},
		{"restarted (other PIDs): a break, then healthy again", healthy, true, []int{8}, local, "unhealthy healthy",
			slotHealth{healthy: true, since: local, pids: []int{8}, until: now.Add(time.Second + healthMargin)}},
		{"passed again where the checks run: the later pass told", healthy, true, []int{7}, now, "healthy",
			slotHealth{healthy: true, since: now, pids: []int{7}, until: now.Add(time.Second + healthMargin)}},
		{"an earlier pass: nothing", healthy, true, []int{7}, local.Add(-time.Second), "", healthy},
	} {
		got, say := nextHealth(tc.s, tc.ok, tc.pids, tc.local, now, time.Second)
		if strings.Join(say, " ") != tc.say || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %q %+v, want %q %+v", tc.name, say, got, tc.say, tc.want)
		}
	}
	if !(slotHealth{}).watching(now) || !healthy.watching(now) || healthy.watching(healthy.until) {
		t.Error("watching: looks go on until healthy and then until its until")
	}
}

// health_check = "manual" under the step machine: a running instance is
// healthy only once its mark at the version it runs exists (mariposa
// deploy health, cluster.ManualHealthKey), watched from then on; an
// update needs a mark at its new version.
//
// Mutation-checked: with the mark not asked (manual as "running"), the
// slot is told healthy before it is marked.
func TestAgentFleetManualHealth(t *testing.T) {
	apply := func(ctx context.Context, out []supervisor.SlotInstance) (supervisor.ApplyResult, error) {
		return supervisor.ApplyResult{}, nil
	}
	ex := &fakeExec{}
	a := newAgentFleet(apply, hclog.NewNullLogger())
	a.ex = ex
	def := cluster.UnitSpec{Unit: placement.Unit{Name: "web", Placement: &schema.Placement{Count: 1,
		Update: schema.Update{HealthCheck: schema.UpdateManual, MinHealthyTime: time.Second}}},
		Services: []*schema.Service{{Name: "web", Command: []string{"x"}}}}
	a.readUnit = func(version, unit string) (cluster.UnitSpec, error) { return def, nil }
	var mu sync.Mutex
	marks := map[string]bool{}
	watched := map[string]int{}
	a.watchKey = func(ctx context.Context, key string) func() bool {
		mu.Lock()
		watched[key]++
		mu.Unlock()
		return func() bool { mu.Lock(); defer mu.Unlock(); return marks[key] }
	}
	var looks atomic.Int32 // the health loop's reads of the snapshots
	a.snapshots = func() []supervisor.Snapshot {
		looks.Add(1)
		return []supervisor.Snapshot{{Service: "web", Slot: "web/0", State: supervisor.StateRunning, PID: 9}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.applyLoop(ctx)
	go a.healthLoop(ctx)
	id := agent.SlotID{Unit: "web", K: 0}
	a.Start(agent.Start{Slot: id, Index: 7, Session: "s", Version: "web/1"})
	ex.waitFor(t, "started", func() bool { return slices.Contains(ex.seen(), "started web/0") })
	key1 := cluster.ManualHealthKey("web", "web/1", 0)
	ex.waitFor(t, "the mark watched", func() bool { mu.Lock(); defer mu.Unlock(); return watched[key1] == 1 })
	from := looks.Load()
	ex.waitFor(t, "three more looks", func() bool { return looks.Load() >= from+3 })
	if slices.ContainsFunc(ex.seen(), func(e string) bool { return strings.HasPrefix(e, "healthy") }) {
		t.Fatalf("healthy before its mark: %v", ex.seen())
	}
	mu.Lock()
	marks[key1] = true
	mu.Unlock()
	ex.waitFor(t, "healthy once marked", func() bool { return slices.Contains(ex.seen(), "healthy web/0 web/1 0001-01-01T00:00:00Z") })
	// An update: the mark was for web/1.
	a.Update(agent.Update{Slot: id, Index: 7, Session: "s", From: "web/1", To: "web/2"})
	key2 := cluster.ManualHealthKey("web", "web/2", 0)
	ex.waitFor(t, "the new version's mark watched", func() bool { mu.Lock(); defer mu.Unlock(); return watched[key2] == 1 })
	mu.Lock()
	marks[key2] = true
	mu.Unlock()
	ex.waitFor(t, "healthy at web/2 once marked", func() bool { return slices.Contains(ex.seen(), "healthy web/0 web/2 0001-01-01T00:00:00Z") })
	mu.Lock()
	defer mu.Unlock()
	if watched[key1] != 1 || watched[key2] != 1 {
		t.Errorf("watches %v: one per version", watched)
	}
}
