package sim

// progress_deadline (with Config.Deploys): the operator's stalled deploy
// (stallBlock: its version never healthy, no healthy_deadline, auto_revert)
// must be failed by its judge on progress_deadline, and so must any
// deployment with one that stops making progress (its revert, a slot no
// node holds meanwhile). The judge promises (fleet/agent/deploy.go,
// JudgeUnit) to fail a deployment once no instance has become healthy at
// its version for progress_deadline plus agent.ProgressSkew since it
// started or the last one did. Checked:
//
//   - no earlier: when the record that fails it on progress_deadline is
//     written, it went progress_deadline + ProgressSkew without progress
//     at least once since it started (between two of its progress
//     points: its start and each HealthyAt at its version a holder's
//     status said; or since the last), leaving out the statuses written
//     less than judgeLag before the failure (the judge's view did not
//     show them yet: ops seed 69, a slot healthy 66 ms before the revert
//     failed, 64 ms before its deadline);
//   - no later than that plus progressSlack, plus the time its judge was
//     absent (no holder of slot 0 running its instance on a node that
//     reaches a leader: a lost node's slot 0 waiting for its takeover, an
//     election; sampled every judgeSample) and the time deploys were
//     paused.

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

const (
	// judgeSample: how often a judge's absence is sampled.
	judgeSample = 100 * time.Millisecond
	// progressSlack is the judge's pace: its timer 1 ms after the
	// deadline, the move's call to the servers (up to 0.5 s one way in
	// the chaos window), a move refused or unanswered sent again 1 s
	// later, and the absence's sampling (judgeSample at each end).
	progressSlack = 2 * time.Second
	// judgeLag: how far the judge's view may lag the statuses when its
	// failure is written: its watch's pace (100 ms), an answer's flight
	// and its move's (up to 0.5 s each in the chaos window).
	judgeLag = time.Second
)

// progressPoint: a HealthyAt at a deployment's version (at), and when
// its status was written (seen).
type progressPoint struct{ at, seen time.Duration }

// statusProgress: the status key written at index moves its unit's
// running deployment's last progress when it says a slot healthy at the
// deployment's version.
func (s *Sim) statusProgress(unit, key string, index uint64) {
	t := s.dep.track[unit]
	e, _, _ := s.store.Get(key, true)
	r, _, _ := s.store.Get(agent.RecordKey(unit), true)
	if t == nil || e == nil || r == nil || e.ModifyIndex != index {
		return
	}
	var st agent.Status
	var d agent.Deployment
	if json.Unmarshal(e.Value, &st) != nil || json.Unmarshal(r.Value, &d) != nil {
		return
	}
	if d.Status != cluster.DeployRunning || t.pd[d.N] == 0 || st.Version != d.Version || st.HealthyAt == nil {
		return
	}
	at := st.HealthyAt.Sub(epoch)
	t.points[d.N] = append(t.points[d.N], progressPoint{at: max(at, t.points[d.N][0].at), seen: s.now})
	if at > t.progress[d.N] {
		t.progress[d.N] = at
	}
}

// progressEnded: deployment n of unit ended with status; failed on
// progress_deadline, no sooner than it allows.
func (s *Sim) progressEnded(unit string, t *depTrack, n uint64, status, reason string) {
	pd := t.pd[n]
	if pd == 0 || t.terminal[n] || status != cluster.DeployFailed || !strings.Contains(reason, "progress_deadline") {
		return
	}
	if s.counting {
		s.res.Deploys.ProgressFailed++
	}
	since := s.now - t.progress[n]
	pts := []time.Duration{s.now}
	for _, p := range t.points[n] {
		if p.seen <= s.now-judgeLag {
			pts = append(pts, p.at)
		}
	}
	slices.Sort(pts)
	var gap time.Duration
	for i := 1; i < len(pts); i++ {
		gap = max(gap, pts[i]-pts[i-1])
	}
	s.note("deployment %s/%d failed on progress_deadline %v after its last progress (longest without: %v)", unit, n, since, gap)
	if gap < pd+agent.ProgressSkew {
		s.violate("deployment %s/%d failed on progress_deadline (%v) though it never went longer than %v without progress (its last at %.3fs)",
			unit, n, pd, gap, t.progress[n].Seconds())
	}
}

// progressTick samples the judges' absence and holds the deployments
// with a progress_deadline to it, while any runs.
func (s *Sim) progressTick() {
	running := false
	for _, u := range s.units {
		t := s.dep.track[u.Name]
		for _, n := range sortedN(t.pd) {
			if t.terminal[n] {
				continue
			}
			running = true
			if !s.judgePresent(u.Name) {
				t.judgeless[n] += judgeSample
			}
			bound := t.pd[n] + agent.ProgressSkew + progressSlack + t.judgeless[n] + s.pausedWithin(u.Name, t.started[n])
			if !t.flagged[n] && s.now-t.progress[n] > bound {
				t.flagged[n] = true
				s.violate("deployment %s/%d (%s) not failed %v after its last progress at %.3fs (progress_deadline %v, its judge absent %v)",
					u.Name, n, t.pdVersion[n], s.now-t.progress[n], t.progress[n].Seconds(), t.pd[n], t.judgeless[n])
			}
		}
	}
	if !running {
		s.dep.sampling = false
		return
	}
	s.at(judgeSample, s.progressTick)
}

// judgePresent: the holder of unit's slot 0 runs its instance and
// reaches a leader.
func (s *Sim) judgePresent(unit string) bool {
	if !s.store.HasLeader() {
		return false
	}
	id := agent.SlotID{Unit: unit, K: 0}
	e, _, _ := s.store.Get(id.Key(), true)
	if e == nil || e.Session == "" {
		return false
	}
	for _, n := range s.nodes {
		if n.sess == e.Session {
			inst := n.inst[id]
			return n.watched() && inst != nil && inst.running
		}
	}
	return false
}
