package cluster

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

func TestRolling(t *testing.T) {
	unit := func(cmd string, count, maxPar int) UnitSpec {
		p := &schema.Placement{Count: count, Update: schema.Update{MaxParallel: maxPar}}
		return UnitSpec{Unit: Unit{Name: "api", Placement: p}, Services: []*schema.Service{{Name: "api", Command: []string{cmd}, Placement: p}}}
	}
	for _, tc := range []struct {
		name      string
		cur, next UnitSpec
		want      bool
	}{
		{"a new command, max_parallel 2: rolling", unit("v1", 3, 2), unit("v2", 3, 2), true},
		{"a new command, max_parallel 0: at once", unit("v1", 3, 2), unit("v2", 3, 0), false},
		{"count only: nothing to replace", unit("v1", 3, 2), unit("v1", 5, 2), false},
		{"update block only: nothing to replace", unit("v1", 3, 2), unit("v1", 3, 1), false},
	} {
		if got := rolling(tc.cur, tc.next); got != tc.want {
			t.Errorf("%s: rolling = %v", tc.name, got)
		}
	}
}

func TestSlotHealthy(t *testing.T) {
	u := UnitSpec{Unit: Unit{Name: "front"}, Services: []*schema.Service{{Name: "web"}, {Name: "side"}}}
	run := func(svc string, pid int, checks bool) supervisor.Snapshot {
		return supervisor.Snapshot{Service: svc, Slot: "front/1", State: supervisor.StateRunning, PID: pid, ChecksPassing: checks}
	}
	for _, tc := range []struct {
		name  string
		snaps []supervisor.Snapshot
		mode  string
		want  bool
		why   string
	}{
		{"both running, checks passing", []supervisor.Snapshot{run("web", 1, true), run("side", 2, true)}, schema.UpdateChecks, true, ""},
		{"a member missing", []supervisor.Snapshot{run("web", 1, true)}, schema.UpdateChecks, false, "side not started"},
		{"checks failing", []supervisor.Snapshot{run("web", 1, false), run("side", 2, true)}, schema.UpdateChecks, false, "web's checks not passing"},
		{"checks failing, health_check running", []supervisor.Snapshot{run("web", 1, false), run("side", 2, true)}, schema.UpdateRunning, true, ""},
		{"another slot's instance does not count", []supervisor.Snapshot{run("web", 1, true), {Service: "side", Slot: "front/2", State: supervisor.StateRunning}},
			schema.UpdateChecks, false, "side not started"},
		{"backoff", []supervisor.Snapshot{run("web", 1, true), {Service: "side", Slot: "front/1", State: supervisor.StateBackoff}},
			schema.UpdateChecks, false, "side backoff"},
	} {
		ok, _, _, why := slotHealthy(tc.snaps, "front/1", u, tc.mode)
		if ok != tc.want || why != tc.why {
			t.Errorf("%s: %v %q, want %v %q", tc.name, ok, why, tc.want, tc.why)
		}
	}
}

// The local clock of a slot: only when mariposa runs every check of every
// member, the latest of their streaks; and passing in the catalog is not
// enough when mariposa's own runs say otherwise.
func TestSlotHealthyLocal(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	u := UnitSpec{Unit: Unit{Name: "front"}, Services: []*schema.Service{{Name: "web"}, {Name: "side"}}}
	run := func(svc string, catalog, local bool, since time.Time) supervisor.Snapshot {
		return supervisor.Snapshot{Service: svc, Slot: "front/1", State: supervisor.StateRunning, PID: 7,
			ChecksPassing: catalog, LocalChecks: local, LocalPassingSince: since}
	}
	for _, tc := range []struct {
		name  string
		snaps []supervisor.Snapshot
		mode  string
		ok    bool
		local time.Time
	}{
		{"every check local: the later streak", []supervisor.Snapshot{run("web", true, true, t0), run("side", true, true, t0.Add(time.Second))},
			schema.UpdateChecks, true, t0.Add(time.Second)},
		{"a member with a check the agent runs: no local clock", []supervisor.Snapshot{run("web", true, true, t0), run("side", true, false, time.Time{})},
			schema.UpdateChecks, true, time.Time{}},
		{"passing in the catalog, not in mariposa's runs: not healthy", []supervisor.Snapshot{run("web", true, true, time.Time{}), run("side", true, true, t0)},
			schema.UpdateChecks, false, time.Time{}},
		{"passing in mariposa's runs, not in the catalog yet: not healthy", []supervisor.Snapshot{run("web", false, true, t0), run("side", true, true, t0)},
			schema.UpdateChecks, false, time.Time{}},
		{"health_check running: no local clock", []supervisor.Snapshot{run("web", true, true, t0), run("side", true, true, t0)},
			schema.UpdateRunning, true, time.Time{}},
	} {
		ok, _, local, why := slotHealthy(tc.snaps, "front/1", u, tc.mode)
		if ok != tc.ok || !local.Equal(tc.local) {
			t.Errorf("%s: %v %v (%q), want %v %v", tc.name, ok, local, why, tc.ok, tc.local)
		}
	}
}

// When min_healthy_time starts counting: from the checks' passing where
// mariposa runs them, once the catalog shows it, never before the wait;
// after a break or a restart, from the look that sees the slot healthy.
func TestNextStreak(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	var zero time.Time
	p1, p2 := []int{11}, []int{12}
	type look struct {
		healthy bool
		pids    []int
		local   time.Time
		now     time.Time
	}
	for _, tc := range []struct {
		name      string
		looks     []look
		wantSince time.Time
		wantBroke bool
	}{
		{"not healthy yet", []look{{false, nil, ms(50), ms(100)}}, zero, false},
		{"healthy in the catalog, checks local: from their passing", []look{
			{false, nil, ms(50), ms(100)}, {true, p1, ms(50), ms(200)}}, ms(50), false},
		{"no local clock: from the look", []look{
			{false, nil, zero, ms(100)}, {true, p1, zero, ms(200)}}, ms(200), false},
		{"local passing from before the wait: from the wait", []look{
			{true, p1, t0.Add(-time.Minute), ms(200)}}, t0, false},
		{"local later than the look (clock of another goroutine): never after now", []look{
			{true, p1, ms(300), ms(200)}}, ms(200), false},
		{"a catalog far behind: at most MaxCatalogLag before it showed the slot passing", []look{
			{false, nil, ms(50), ms(100)}, {true, p1, ms(50), ms(1800)}}, ms(1800).Add(-MaxCatalogLag), false},
		{"still healthy: the start stays", []look{
			{true, p1, ms(50), ms(200)}, {true, p1, ms(50), ms(2000)}}, ms(50), false},
		{"a break in the catalog: from the look that sees it healthy again", []look{
			{true, p1, ms(50), ms(200)}, {false, p1, ms(50), ms(300)}, {true, p1, ms(50), ms(400)}}, ms(400), true},
		{"a restart: from the look that sees the new process healthy", []look{
			{true, p1, ms(50), ms(200)}, {true, p2, ms(350), ms(400)}}, ms(400), true},
		{"a break where the checks run, not seen in the catalog: from their passing again", []look{
			{true, p1, ms(50), ms(200)}, {true, p1, ms(900), ms(1000)}}, ms(900), false},
		{"after a break, a later local streak still moves the start", []look{
			{true, p1, ms(50), ms(200)}, {false, p1, zero, ms(300)}, {true, p1, ms(50), ms(400)}, {true, p1, ms(500), ms(600)}}, ms(500), true},
	} {
		var s healthStreak
		for _, l := range tc.looks {
			s = nextStreak(s, l.healthy, l.pids, l.local, t0, l.now)
		}
		if !s.since.Equal(tc.wantSince) || s.broke != tc.wantBroke {
			t.Errorf("%s: since %v broke %v, want %v %v", tc.name, s.since.Sub(t0), s.broke, tc.wantSince.Sub(t0), tc.wantBroke)
		}
	}
}

func TestHealthWait(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	for _, tc := range []struct {
		name       string
		since, now time.Time
		min        time.Duration
		want       time.Duration
	}{
		{"not healthy yet: look again soon", time.Time{}, t0, 2 * time.Second, healthPoll},
		{"healthy, long to go: recheck", t0, t0.Add(500 * ms), 2 * time.Second, healthRecheck},
		{"healthy, 30 ms to go: wake at the end, not a tick later", t0, t0.Add(1970 * ms), 2 * time.Second, 30 * ms},
		{"healthy, the end passed: at once", t0, t0.Add(2100 * ms), 2 * time.Second, 0},
		{"min_healthy_time 0: at once", t0, t0, 0, 0},
	} {
		if got := healthWait(tc.since, tc.now, tc.min); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
