package executor

import (
	"context"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/internal/holdrule"
	"github.com/mariposa-sh/mariposa/internal/lease"
)

// confirm performs agent.Confirm: consistent reads of the keys, sent at
// sent, 128 keys a transaction, all at once; any failure fails the whole.
//
// During a Consul election the server the local agent talks to holds a
// consistent read until a leader is elected (rpc_hold_timeout, 7 s), far
// past the strict deadline (lock_delay/2), and a read cut short says
// nothing (internal/holdrule: a timeout never extends a hold). So, as
// internal/lease does, a read still unanswered after lock_delay/10 is
// probed every lock_delay/10 with requests the server answers at once from
// its own state (lease.ServerProbe: a stale read of the first key and
// /v1/status/leader); a probe that finds no leader is posted at once as
// agent.ConfirmProbed at its own send time, and the agent decides what it
// proves (holdrule's rule, fleet/agent/noleader.go). A read that times out
// is classified by what its probes found (or one last probe): a timeout
// with no-leader evidence is a no-leader failure, any other an unproven
// one. The agent sends the next Confirm every lock_delay/5 whatever this
// one does, which is the lease's second read.
func (e *Executor) confirm(a agent.Confirm, sent time.Time) {
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.LockDelay)
	defer cancel()
	type answer struct {
		held map[agent.SlotID]bool
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		held, err := e.readHeld(ctx, a.Slots, a.Session)
		answered <- answer{held, err}
	}()
	every := max(e.cfg.LockDelay/10, 10*time.Millisecond)
	slow := time.NewTicker(every)
	defer slow.Stop()
	probed := holdrule.Unproven
	key := ""
	if len(a.Slots) > 0 {
		key = a.Slots[0].Key()
	}
	probe := func(d time.Duration) holdrule.Kind {
		if key == "" {
			return holdrule.Unproven
		}
		pctx, cancel := context.WithTimeout(e.ctx, d)
		defer cancel()
		return lease.ServerProbe(pctx, e.cfg.Client, key, every)
	}
	for {
		select {
		case r := <-answered:
			done := agent.ConfirmDone{Sent: sent, Held: r.held, Err: r.err}
			if r.err != nil {
				kind := lease.NoLeaderAnswer(r.err)
				if kind != holdrule.NoLeader && ctx.Err() != nil && e.ctx.Err() == nil {
					// No answer in time: what the server said meanwhile,
					// or says now.
					kind = probed
					if kind != holdrule.NoLeader {
						kind = probe(e.cfg.LockDelay / 2)
					}
				}
				done.NoLeader = kind == holdrule.NoLeader
			}
			e.inbox.post(sessionAns{session: a.Session, in: done})
			return
		case <-slow.C:
			if probed == holdrule.NoLeader {
				continue
			}
			at := time.Now()
			if probed = probe(max(e.cfg.LockDelay/5, 100*time.Millisecond)); probed == holdrule.NoLeader {
				e.inbox.post(sessionAns{session: a.Session, in: agent.ConfirmProbed{Sent: at, NoLeader: true}})
			}
		}
	}
}
