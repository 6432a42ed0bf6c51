package supervisor

import (
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/schema"
)

// checkTrack is what an instance remembers of one of its checks.
type checkTrack struct {
	Name          string
	Status        string
	ModifyIndex   uint64
	CriticalSince time.Time     // first seen critical in the current streak
	StaleAfter    time.Duration // how long a pre-start status may linger
}

// runInfo is the part of the current run health decisions need.
type runInfo struct {
	Started time.Time
	// Index is the health index seen when the process started: a status
	// modified after it is news about this run.
	Index uint64
}

// unhealthyCheck says whether a check warrants a restart now. A check counts
// only after the grace period, once it has been critical for unhealthy_for,
// and only if its status is about this run (modified since the start, or the
// check had time to run since then): a restart never fires on the stale
// status the previous process left behind. When nothing fires yet, recheck
// says when to look again without new data (0: not needed).
func unhealthyCheck(tracks map[string]*checkTrack, run runInfo, r schema.Restart, now time.Time) (name string, recheck time.Duration) {
	readyAt := run.Started.Add(r.Grace)
	for _, c := range tracks {
		if c.Status != api.HealthCritical {
			continue
		}
		at := c.CriticalSince
		if at.Before(readyAt) {
			at = readyAt
		}
		at = at.Add(r.UnhealthyFor)
		if c.ModifyIndex <= run.Index {
			// Status from before this run: wait until the check has run.
			if stale := readyAt.Add(c.StaleAfter); stale.After(at) {
				at = stale
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
func updateTracks(tracks map[string]*checkTrack, svc *schema.Service, serviceID string, states []checks.CheckState, now time.Time) {
	seen := map[string]bool{}
	for _, st := range states {
		if st.CheckID == checks.SupervisorCheckID(serviceID) {
			continue
		}
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
			t = &checkTrack{Name: def.Name, StaleAfter: staleAfter(def)}
			tracks[st.CheckID] = t
		}
		if st.Status == api.HealthCritical && t.Status != api.HealthCritical {
			t.CriticalSince = now
		}
		t.Status, t.ModifyIndex = st.Status, st.ModifyIndex
	}
	for id := range tracks {
		if !seen[id] {
			delete(tracks, id)
		}
	}
}

// staleAfter is how long after a start a check needs before its status must
// have been refreshed.
func staleAfter(c *schema.Check) time.Duration {
	switch c.Kind {
	case schema.CheckTTL:
		return c.TTL
	case schema.CheckArgs:
		return checks.ArgsCheckTTL(c)
	}
	return c.Interval + c.Timeout
}
