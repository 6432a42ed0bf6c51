package cluster

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

func TestSlotHealthy(t *testing.T) {
	u := UnitSpec{Unit: placement.Unit{Name: "front"}, Services: []*schema.Service{{Name: "web"}, {Name: "side"}}}
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
	u := UnitSpec{Unit: placement.Unit{Name: "front"}, Services: []*schema.Service{{Name: "web"}, {Name: "side"}}}
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
