package agent

import (
	"time"

	"github.com/mariposa-sh/mariposa/internal/holdrule"
)

// ConfirmProbed is evidence gathered while a Confirm was unanswered, as
// internal/lease gathers it: a consistent read is held by a server waiting
// for a leader (up to Consul's rpc_hold_timeout, 7 s, far past the strict
// deadline), so the executor probes the server every lock_delay/10 with
// requests it answers at once from its own state (lease.ServerProbe: a
// stale read, /v1/status/leader). NoLeader: the server said it could not
// reach a Raft leader, counted at the probe's send time Sent. A probe that
// found a leader proves nothing and is not sent.
type ConfirmProbed struct {
	Sent     time.Time
	NoLeader bool
}

// probed records a probe's evidence under internal/holdrule's rule: a
// NoLeader probe sent after the last confirmation is a failed attempt of
// kind NoLeader, which (with no other kind of failure since) stretches the
// exclusive holds' deadline to D + lock_delay/2 from that confirmation,
// never further (holdrule.Rule.Deadline). It outlives the read it probed:
// that read, held until a new leader is elected, may come back late and
// confirm the holds at its own (earlier) send time. It touches no
// confirmation in flight.
func (a *Agent) probed(in ConfirmProbed) {
	if !in.NoLeader {
		return
	}
	a.failed = append(a.failed, holdrule.Attempt{Sent: in.Sent, Kind: holdrule.NoLeader})
	if a.cfg.Faults.ProbeConfirms {
		for _, h := range a.held {
			if c := in.Sent.Add(-time.Nanosecond); c.After(h.confirmed) {
				h.confirmed = c
			}
		}
	}
}
