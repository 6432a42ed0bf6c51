package supervisor

import (
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/schema"
)

// checkTrack is what an instance remembers of one of its checks.
type checkTrack struct {
	Name      string
	Status    string
	FirstSeen time.Time // when this check (re)appeared in the catalog
	// CriticalSince is when the current critical streak was first seen.
	CriticalSince time.Time
	// PassingSince is when the check was seen turning passing from
	// another status; zero if it has been passing since first seen.
	PassingSince time.Time
	// Transitioned: the streak began with a change observed from a
	// non-critical status, so it is the result of a probe and not the
	// critical status Consul gives a check when it is (re-)registered.
	Transitioned bool
	// StaleAfter is how long the check may need to report for the first
	// time (interval + timeout, or the TTL).
	StaleAfter time.Duration
}

// unhealthyCheck says whether a check warrants a restart now. A critical
// check counts after the grace period, once it has stayed critical for
// unhealthy_for, and only if it says something about this run: either it
// turned critical after the start, or it has had time to report since the
// start (and since it was registered, since Consul registers checks
// critical). So a restart never fires on the status the previous process
// left behind, nor on a check re-registered after an agent restart. When
// nothing fires yet, recheck says when to look again (0: no need).
func unhealthyCheck(tracks map[string]*checkTrack, started time.Time, r schema.Restart, now time.Time) (name string, recheck time.Duration) {
	readyAt := started.Add(r.Grace)
	for _, c := range tracks {
		if c.Status != api.HealthCritical {
			continue
		}
		at := c.CriticalSince
		if at.Before(readyAt) {
			at = readyAt
		}
		at = at.Add(r.UnhealthyFor)
		if !(c.Transitioned && c.CriticalSince.After(started)) {
			from := started
			if c.FirstSeen.After(from) {
				from = c.FirstSeen
			}
			if fresh := from.Add(c.StaleAfter); fresh.After(at) {
				at = fresh
			}
		}
		if !now.Before(at) {
			if name == "" || c.Name < name {
				name = c.Name
			}
			continue
		}
		if d := at.Sub(now); recheck == 0 || d < recheck {
			recheck = d
		}
	}
	if name != "" {
		return name, 0
	}
	return "", recheck
}

// updateTracks merges a new health view into tracks. Only the service's own
// checks count; the supervisor check is mariposa's output, not an input.
func updateTracks(tracks map[string]*checkTrack, svc *schema.Service, serviceID string, states []checks.CatalogCheck, now time.Time) {
	seen := map[string]bool{}
	for _, st := range states {
		var def *schema.Check
		for _, c := range svc.Checks {
			if checks.CheckID(serviceID, c.Name) == st.CheckID {
				def = c
			}
		}
		if def == nil {
			continue
		}
		seen[st.CheckID] = true
		t, ok := tracks[st.CheckID]
		if !ok {
			t = &checkTrack{Name: def.Name, StaleAfter: staleAfter(def), FirstSeen: now}
			tracks[st.CheckID] = t
			if st.Status == api.HealthCritical {
				t.CriticalSince = now
			}
		} else if st.Status == api.HealthCritical && t.Status != api.HealthCritical {
			t.CriticalSince, t.Transitioned = now, true
		} else if st.Status == api.HealthPassing && t.Status != api.HealthPassing {
			t.PassingSince = now
		}
		t.Status = st.Status
	}
	for id := range tracks {
		if !seen[id] {
			delete(tracks, id)
		}
	}
}

// staleAfter is how long after a start or a registration a check may take
// to report its first result.
func staleAfter(c *schema.Check) time.Duration {
	switch c.Kind {
	case schema.CheckTTL:
		return c.TTL
	case schema.CheckArgs:
		return checks.ArgsCheckTTL(c)
	}
	return c.Interval + c.Timeout
}
