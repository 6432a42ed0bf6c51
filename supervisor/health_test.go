package supervisor

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/schema"
)

func TestUnhealthyCheck(t *testing.T) {
	start := t0
	sec := func(n float64) time.Time { return start.Add(time.Duration(n * float64(time.Second))) }
	type tc struct {
		name         string
		track        checkTrack
		grace, unfor time.Duration
		now          time.Time
		fire         bool
		recheck      time.Duration
	}
	crit := func(first, since time.Time, transitioned bool) checkTrack {
		return checkTrack{Name: "http", Status: api.HealthCritical, FirstSeen: first, CriticalSince: since,
			Transitioned: transitioned, StaleAfter: 3 * time.Second}
	}
	cases := []tc{
		{name: "passing never fires", track: checkTrack{Name: "http", Status: api.HealthPassing}, now: sec(100)},
		{name: "warning never fires", track: checkTrack{Name: "http", Status: api.HealthWarning}, now: sec(100)},
		{name: "fresh critical, no grace, fires at once",
			track: crit(sec(-60), sec(1), true), now: sec(1), fire: true},
		{name: "inside grace waits for its end",
			track: crit(sec(-60), sec(1), true), grace: 10 * time.Second, now: sec(1), recheck: 9 * time.Second},
		{name: "after grace fires",
			track: crit(sec(-60), sec(1), true), grace: 10 * time.Second, now: sec(10), fire: true},
		{name: "unhealthy_for counts from the critical streak",
			track: crit(sec(-60), sec(5), true), unfor: 4 * time.Second, now: sec(7), recheck: 2 * time.Second},
		{name: "unhealthy_for elapsed fires",
			track: crit(sec(-60), sec(5), true), unfor: 4 * time.Second, now: sec(9), fire: true},
		{name: "critical left by the previous run waits for a report about this run",
			track: crit(sec(-60), sec(-1), true), now: sec(0.5), recheck: 2500 * time.Millisecond},
		{name: "critical left by the previous run fires once the check had time to report",
			track: crit(sec(-60), sec(-1), true), now: sec(3), fire: true},
		{name: "a re-registered check (critical by default) is not acted on at once",
			track: crit(sec(50), sec(50), false), now: sec(51), recheck: 2 * time.Second},
		{name: "a re-registered check still critical after it could report fires",
			track: crit(sec(50), sec(50), false), now: sec(53), fire: true},
		{name: "never healthy since start fires after grace and a report",
			track: crit(sec(0), sec(0), false), grace: 1 * time.Second, now: sec(3), fire: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := c.track
			name, recheck := unhealthyCheck(map[string]*checkTrack{"x": &tr}, start,
				schema.Restart{Grace: c.grace, UnhealthyFor: c.unfor}, c.now)
			if (name != "") != c.fire || recheck != c.recheck {
				t.Fatalf("fired %q recheck %s; want fire=%v recheck %s", name, recheck, c.fire, c.recheck)
			}
		})
	}
}

func TestUpdateTracks(t *testing.T) {
	svc := &schema.Service{Name: "web", Checks: []*schema.Check{{Name: "http", Kind: schema.CheckHTTP, Interval: 2 * time.Second, Timeout: time.Second}}}
	id := "web-n1"
	tracks := map[string]*checkTrack{}
	st := func(status string) []checks.CatalogCheck {
		return []checks.CatalogCheck{
			{CheckID: checks.CheckID(id, "http"), Status: status},
			{CheckID: checks.SupervisorCheckID(id), Status: api.HealthCritical},
		}
	}
	updateTracks(tracks, svc, id, st(api.HealthCritical), sec0(0))
	tr := tracks[checks.CheckID(id, "http")]
	if len(tracks) != 1 || tr.Transitioned || tr.CriticalSince != sec0(0) || tr.StaleAfter != 3*time.Second {
		t.Fatalf("first sight: %+v (tracks %d)", tr, len(tracks))
	}
	updateTracks(tracks, svc, id, st(api.HealthPassing), sec0(1))
	updateTracks(tracks, svc, id, st(api.HealthCritical), sec0(2))
	if !tr.Transitioned || tr.CriticalSince != sec0(2) {
		t.Fatalf("transition: %+v", tr)
	}
	updateTracks(tracks, svc, id, st(api.HealthCritical), sec0(3))
	if tr.CriticalSince != sec0(2) {
		t.Fatalf("a continuing streak moved: %+v", tr)
	}
	// The check vanishes (agent lost its state): forgotten, and when it comes
	// back it is a new sighting.
	updateTracks(tracks, svc, id, nil, sec0(4))
	if len(tracks) != 0 {
		t.Fatal("vanished check kept")
	}
	updateTracks(tracks, svc, id, st(api.HealthCritical), sec0(5))
	if tr := tracks[checks.CheckID(id, "http")]; tr.Transitioned || tr.FirstSeen != sec0(5) {
		t.Fatalf("re-registered: %+v", tr)
	}
}

func sec0(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
