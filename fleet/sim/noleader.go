package sim

import (
	"fmt"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/consulmodel"
)

// heldConfirm is a confirmation read that reached a server without a
// leader (an election, or a minority side), as fleet/executor sees it on
// real Consul: the server holds a consistent read until a leader is
// elected (rpc_hold_timeout, 7 s), so no answer comes; the executor
// probes the server every lock_delay/10 (a stale read and
// /v1/status/leader, answered at once from its own state) and posts what a
// probe that finds no leader proves as agent.ConfirmProbed, at the probe's
// send time; at lock_delay after the read was sent the executor gives up
// on it, and reports it as a no-leader failure (its probes found none). A
// leader that is back (and reaches the node's server) by then serves the
// read late: it confirms the holds at the read's send time, which is safe
// (the session was valid when it was served, after it was sent).
func (s *Sim) heldConfirm(n *node, gen int, c agent.ConfirmDone, apply func() any) {
	every := s.cfg.LockDelay / 10
	noLeader := func() bool { return n.reachable() && (!s.store.HasLeader() || n.minority) }
	found := false // the executor stops probing once a probe found no leader
	for d := every; d < s.cfg.LockDelay; d += every {
		s.at(d, func() {
			if n.gen != gen || found || !noLeader() {
				return
			}
			found = true
			sent := s.wall()
			s.at(s.latency(), func() {
				if n.gen == gen {
					s.step(n, agent.ConfirmProbed{Sent: sent, NoLeader: true})
				}
			})
		})
	}
	s.at(max(0, s.cfg.LockDelay-s.wall().Sub(c.Sent)), func() {
		if n.gen != gen {
			return
		}
		switch {
		case !n.reachable():
			// Cut off meanwhile: a timeout, unless a probe had found no
			// leader before.
			c.Err, c.NoLeader = fmt.Errorf("no answer"), found
		case !noLeader():
			if ans := apply(); ans != nil {
				s.notify()
				s.step(n, ans)
				return
			}
			c.Err = fmt.Errorf("no answer")
		default:
			c.Err, c.NoLeader = consulmodel.ErrNoLeader, true
		}
		s.step(n, c)
	})
}
