package executor

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// What the node tells operators: its decisions' audit records written
// alone (the ones with no transaction of their own; agent.Audits), the
// metrics' snapshot (Stats), what it waits for (Waiting) and the claim
// delay (Config.OnClaim). The loop is the only reader of the agent: it
// publishes a snapshot after each batch of inputs, which Stats and
// Waiting read without waiting for it.

// snapshot is what the loop last published.
type snapshot struct {
	stats     cluster.FleetStats
	waiting   []string
	firstLive bool
	services  map[string]uint64 // svcSeen (shared: replaced, never changed)
}

// mostWaiting: Waiting lists at most this many slots.
const mostWaiting = 10

// Stats is a snapshot of what this node last heard and holds, with
// cluster.FleetStats' meaning for each field (agent.Agent.Stats), as of
// the loop's last batch of inputs: Ready once SetUnits has been stepped
// and the agent has heard the live nodes, control/ (Config.Control) and
// each unit's slots. It only reads, and its slices are shared (not to be
// changed); before the loop's first step it is the zero FleetStats with
// the node's name (not Ready).
func (e *Executor) Stats() cluster.FleetStats {
	if s := e.snap.Load(); s != nil {
		return s.stats
	}
	return cluster.FleetStats{Node: e.cfg.Node}
}

// Waiting says, one line per free slot this node is placed for, when it
// claims it or why it does not, as of the loop's last batch: "slot api/2
// free; rank 2, claiming in 400ms" (agent.Agent.Waiting; at most 10 lines
// and "and N more"). Empty when it waits for none. For the node's
// liveness check output.
func (e *Executor) Waiting() string {
	s := e.snap.Load()
	if s == nil {
		return ""
	}
	return strings.Join(s.waiting, "\n")
}

// FirstLive reports whether this node is the first live supervisor by
// name as the loop last heard the members and the failing (false before
// both have answered): the node that does the fleet's housekeeping
// (pruning the audit log, command/auditfile.go).
func (e *Executor) FirstLive() bool {
	s := e.snap.Load()
	return s != nil && s.firstLive
}

// firstLive: no member that is not failing sorts before node; false
// until both watches have answered.
func firstLive(node string, members, failing []string, have bool) bool {
	if !have {
		return false
	}
	for _, n := range members {
		if n < node && !slices.Contains(failing, n) {
			return false
		}
	}
	return true
}

// publishState publishes the agent's snapshot (from the loop).
func (e *Executor) publishState() {
	now := time.Now()
	w := e.ag.Waiting(now)
	if len(w) > mostWaiting {
		w = append(w[:mostWaiting:mostWaiting], "and "+strconv.Itoa(len(w)-mostWaiting)+" more")
	}
	st := e.ag.Stats(now)
	st.Ready = st.Ready && e.unitsSet // the agent starts with no units, before SetUnits
	e.snap.Store(&snapshot{stats: st, waiting: w, firstLive: firstLive(e.cfg.Node, e.members, e.failing, e.haveMem && e.haveFail), services: e.svcSeen})
}

// noteClaims keeps, for each Claim among acts, when the agent first saw
// its slot vacant; claimed tells Config.OnClaim once its answer says
// claimed.
func (e *Executor) noteClaims(acts []any) {
	if e.cfg.OnClaim == nil {
		return
	}
	for _, a := range acts {
		if c, ok := a.(agent.Claim); ok {
			if since, ok := e.ag.VacantSince(c.Slot); ok {
				if e.vacant == nil {
					e.vacant = map[agent.SlotID]time.Time{}
				}
				e.vacant[c.Slot] = since
			} else {
				delete(e.vacant, c.Slot)
			}
		}
	}
}

// claimed tells Config.OnClaim of a claim's answer (from the loop).
func (e *Executor) claimed(in any) {
	d, ok := in.(agent.ClaimDone)
	if !ok || e.cfg.OnClaim == nil {
		return
	}
	since, seen := e.vacant[d.Slot]
	delete(e.vacant, d.Slot)
	if d.OK && seen {
		e.cfg.OnClaim(d.Slot.Unit, time.Since(since))
	}
}

// writeAudits writes decisions' records that have no transaction of
// their own (agent.Alone: a hold lost, a claim held back, ...), 64 to a
// transaction. A failure is logged: the decision stands.
func (e *Executor) writeAudits(recs []agent.Record) {
	for from := 0; from < len(recs); from += maxTxnOps / 2 {
		var ops api.TxnOps
		for _, r := range recs[from:min(from+maxTxnOps/2, len(recs))] {
			ops = append(ops, e.auditOp(r))
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Request)
		ok, _, _, err := e.cfg.Client.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
		cancel()
		if err != nil || !ok {
			e.log.Warn("could not write the audit records", "records", len(ops), "error", err)
		}
	}
}
