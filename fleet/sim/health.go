package sim

// Health breaks (with Config.Deploys): an instance the node's supervisor
// said healthy at its version breaks for a while (agent.InstanceUnhealthy)
// and is said healthy again later (agent.InstanceHealthy), or stays
// broken until it is replaced, during a rollout and outside one. One
// first healthy report in startedOdds of an instance started in the run
// breaks (an update's, a claim's), one in placedOdds of the placed
// fleet's; each instance at most once, at most maxBreaks a run: drawn
// from a source of their own (Sim.dep.hrng), so that a seed's other draws
// stay as they were until the first break.
//
// What the agent promises (fleet/agent/deploy.go, InstanceUnhealthy): a
// break before the instance has been healthy for min_healthy_time starts
// the time over from the report that says it healthy again; a break after
// that changes nothing. checkStreak holds every healthy status a holder
// publishes to it: the instance was said healthy, without a break, from
// HealthyAt - min_healthy_time to HealthyAt, and HealthyAt is not later
// than the publish.

import (
	"time"

	"github.com/mariposa-sh/mariposa/fleet/agent"
)

const (
	// placedOdds, startedOdds: one first healthy report in placedOdds of
	// the placed fleet's instances breaks, one in startedOdds of those
	// started in the run (most during a rollout).
	placedOdds, startedOdds = 25, 8
	// maxBreaks: the breaks of a run at most.
	maxBreaks = 12
	// earlyBreakBy, earlyBreakFor: a break within min_healthy_time comes
	// less than this after the healthy report and lasts less than
	// earlyBreakFor (100 ms at least): an updated instance said healthy
	// at healthyAfter is healthy again by 50 ms + 300 ms + 1.2 s + 1.2 s,
	// before updateBlock's healthy_deadline of 3 s, so that a break alone
	// fails no deployment (one broken for good does, which is a bad
	// version's case).
	earlyBreakBy, earlyBreakFor = 1200 * time.Millisecond, 1200 * time.Millisecond
)

// span: the instance was said healthy from from until to (negative: it
// still is).
type span struct{ from, to time.Duration }

// reportHealthy: the node's supervisor says inst healthy at version; it
// may break later.
func (s *Sim) reportHealthy(n *node, id agent.SlotID, inst *instance, version string, odds int) {
	if inst != nil {
		inst.broken = false
		inst.spans = append(inst.spans, span{from: s.now, to: -1})
	}
	s.step(n, agent.InstanceHealthy{Slot: id, Version: version})
	if inst != nil && len(inst.spans) == 1 {
		s.maybeBreak(n, id, inst, version, odds)
	}
}

// maybeBreak draws whether inst breaks, when and for how long: within
// min_healthy_time (the time must count again), or after it (nothing
// changes), for a while or for good (after min_healthy_time only).
func (s *Sim) maybeBreak(n *node, id agent.SlotID, inst *instance, version string, odds int) {
	r := s.dep.hrng
	if odds <= 0 || s.dep.breaks >= maxBreaks || r.IntN(odds) != 0 {
		return
	}
	s.dep.breaks++
	var after, lasts time.Duration
	switch r.IntN(3) {
	case 0: // within min_healthy_time
		after = time.Duration(r.Int64N(int64(earlyBreakBy)))
		lasts = 100*time.Millisecond + time.Duration(r.Int64N(int64(earlyBreakFor-100*time.Millisecond)))
	case 1: // after it, for a while
		after = updateBlock.MinHealthyTime + 500*time.Millisecond + time.Duration(r.Int64N(int64(6*time.Second)))
		lasts = 100*time.Millisecond + time.Duration(r.Int64N(int64(3*time.Second)))
	default: // after it, for good (until the instance is replaced)
		after = updateBlock.MinHealthyTime + 500*time.Millisecond + time.Duration(r.Int64N(int64(6*time.Second)))
	}
	gen := n.gen
	live := func() bool { return n.gen == gen && n.inst[id] == inst && inst.running }
	s.at(after, func() {
		if !live() {
			return
		}
		inst.broken = true
		inst.spans[len(inst.spans)-1].to = s.now
		down := s.dep.down[id].n == n
		s.note("%s %s breaks at %s (down for an update: %v, for %v)", n.name, id, version, down, lasts)
		if s.counting {
			s.res.Deploys.Breaks++
			if down {
				s.res.Deploys.BreaksDown++
			}
		}
		s.step(n, agent.InstanceUnhealthy{Slot: id, Version: version})
		if lasts == 0 {
			return
		}
		s.at(lasts, func() {
			if live() {
				s.note("%s %s healthy again at %s", n.name, id, version)
				s.reportHealthy(n, id, inst, version, 0)
			}
		})
	})
}

// checkStreak: a healthy status a holder publishes says a time (HealthyAt)
// by which its instance had been said healthy for min_healthy_time
// without a break, and not later than now.
func (s *Sim) checkStreak(n *node, a agent.Publish) {
	inst := n.inst[a.Slot]
	if a.Kind != "healthy" || a.Status.HealthyAt == nil || inst == nil || inst.version != a.Status.Version {
		return
	}
	min := updateBlock.MinHealthyTime
	if v := s.deployView(a.Slot.Unit); v.Record != nil {
		min = v.Record.Update.MinHealthyTime
	}
	at := a.Status.HealthyAt.Sub(epoch)
	if at > s.now {
		s.violate("slot %s on %s published healthy at %s from %.3fs, in the future", a.Slot, n.name, a.Status.Version, at.Seconds())
		return
	}
	for _, sp := range inst.spans {
		if sp.from <= at-min && (sp.to < 0 || sp.to >= at) {
			return
		}
	}
	s.violate("slot %s on %s published healthy at %s from %.3fs, not healthy without a break for min_healthy_time (%v) before it: said healthy %v",
		a.Slot, n.name, a.Status.Version, at.Seconds(), min, spansString(inst.spans))
}

func spansString(sps []span) string {
	out := "["
	for i, sp := range sps {
		if i > 0 {
			out += " "
		}
		if sp.to < 0 {
			out += time.Duration(sp.from).Round(time.Millisecond).String() + "-"
		} else {
			out += sp.from.Round(time.Millisecond).String() + "-" + sp.to.Round(time.Millisecond).String()
		}
	}
	return out + "]"
}
