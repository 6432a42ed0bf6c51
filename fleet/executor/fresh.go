package executor

import (
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// A units change (a deploy: a new unit, a count raised) takes effect once
// the members and the controls have been read after it:
//
//	SetUnits ──> pending ──(read members, control/)──> freshRead ──> UnitsAnswer
//	                │                                        ▲
//	                └────────── no answer for freshWait ──────┘ (at once then)
//
// The watches' last answers may be older than the deployment: each answers
// no sooner than watchEvery after its last, later on a loaded node. Ranked
// on them, a node registered just before the deploy (which the user saw,
// as `deploy` did) is missing, and the node ranking itself first claims a
// slot whose affinity prefers the missing node (CI's
// TestStatefulWorkedExample), or one whose constraint the node's new
// attributes exclude; and a pause written just before the deploy is not
// known yet, so its new slot is claimed (TestFleetPause). A read started
// after the change was heard sees everything written before the
// deployment (a default read is the leader's). A later change waits for
// its own read; a stop does not wait.

// freshWait bounds the wait for the fresh read: a node cut off from Consul
// still applies a change (removals stop their instances); it claims
// nothing there anyway.
const freshWait = 5 * time.Second

// pendingUnits: a units change waiting for the read seq.
type pendingUnits struct {
	units setUnits
	seq   uint64
}

// freshRead: the read seq's answers (nil: not read, freshWait passed).
type freshRead struct {
	seq     uint64
	members *membersAns
	control *agent.ControlView
}

// unitsChange starts the fresh read for a units change, or applies it at
// once (a stop).
func (e *Executor) unitsChange(in setUnits) {
	if in.stopping || e.cfg.Faults.NoFreshRead {
		e.fresh = nil
		e.applyUnits(in)
		return
	}
	e.freshSeq++
	e.fresh = &pendingUnits{units: in, seq: e.freshSeq}
	go e.readFresh(e.freshSeq)
}

// freshRead steps what the read found, then applies the change that
// waited for it.
func (e *Executor) freshRead(in freshRead) {
	if in.members != nil {
		e.membersAnswer(*in.members)
	}
	if in.control != nil {
		e.step(agent.ControlAnswer{View: in.control})
	}
	if p := e.fresh; p != nil && in.seq >= p.seq && !e.stopping {
		e.fresh = nil
		e.applyUnits(p.units)
	}
}

// applyUnits gives the agent the units.
func (e *Executor) applyUnits(in setUnits) {
	e.watchUnits(in.units)
	e.followServices(in.units)
	e.step(agent.UnitsAnswer{Units: in.units, Stopping: in.stopping})
	e.unitsSet = true
	e.readPrevious(in.units)
}

// readFresh reads the members and (with the controls on) control/, a
// second apart until both answer or freshWait passes.
func (e *Executor) readFresh(seq uint64) {
	deadline := time.Now().Add(freshWait)
	ans := freshRead{seq: seq}
	for e.ctx.Err() == nil {
		if ans.members == nil {
			ctx, cancel := e.request()
			ss, meta, err := e.cfg.Client.Catalog().Service(e.cfg.Service, "", (&api.QueryOptions{}).WithContext(ctx))
			cancel()
			if err == nil {
				m := membersOf(ss, meta.LastIndex)
				ans.members = &m
			} else {
				e.log.Debug("fresh read of the members", "error", err)
			}
		}
		if ans.control == nil && e.cfg.Control {
			ctx, cancel := e.request()
			pairs, meta, err := e.cfg.Client.KV().List(cluster.ControlPrefix, (&api.QueryOptions{}).WithContext(ctx))
			cancel()
			if err == nil {
				ans.control = e.controlView(pairs, meta.LastIndex)
			} else {
				e.log.Debug("fresh read of control/", "error", err)
			}
		}
		if ans.members != nil && (ans.control != nil || !e.cfg.Control) || !time.Now().Before(deadline) {
			break
		}
		sleep(e.ctx, min(time.Second, time.Until(deadline)))
	}
	e.inbox.post(ans)
}
