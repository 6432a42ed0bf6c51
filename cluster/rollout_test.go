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
		ok, _, why := slotHealthy(tc.snaps, "front/1", u, tc.mode)
		if ok != tc.want || why != tc.why {
			t.Errorf("%s: %v %q, want %v %q", tc.name, ok, why, tc.want, tc.why)
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
