package holdrule

import "time"

// DefaultDetect is D with Consul's LAN gossip defaults: the floor of
// memberlist's suspicion timeout, suspicion_mult (4) x max(1, log10(N)) x
// probe_interval (1s), before any member can declare a node dead.
const DefaultDetect = 4 * time.Second

// Kind says what a failed confirmation attempt proves.
type Kind int

const (
	// Unproven: no answer (a timeout), the local agent unreachable, or an
	// answer that says nothing of the leader (ACL, malformed). The strict
	// rule applies.
	Unproven Kind = iota
	// NoLeader: the local agent answered, relaying a server that could not
	// reach a Raft leader (see the package documentation).
	NoLeader
)

func (k Kind) String() string {
	if k == NoLeader {
		return "no-leader"
	}
	return "unproven"
}

// Attempt is one failed attempt to confirm a hold, or one piece of evidence
// gathered while an attempt was unanswered: when the request that showed it
// was sent, and what it proves.
type Attempt struct {
	Sent time.Time
	Kind Kind
}

// Rule holds a hold's timing: LockDelay is the session's lock delay L,
// Detect the failure-detection floor D (0: the strict rule always).
type Rule struct {
	LockDelay time.Duration
	Detect    time.Duration
}

// Strict is the deadline of a hold last confirmed at c when nothing is
// known since: c + L/2.
func (r Rule) Strict(c time.Time) time.Time { return c.Add(r.LockDelay / 2) }

// Deadline is the moment a hold last confirmed at c (the send time of the
// last read that showed it held) must be assumed lost, given the attempts
// to confirm it that failed. Attempts sent at or before c say nothing of
// it. While every failed attempt since c was NoLeader, and there was one,
// the deadline is c + D + L/2; otherwise c + L/2.
func (r Rule) Deadline(c time.Time, failed []Attempt) time.Time {
	extended := false
	for _, a := range failed {
		if !a.Sent.After(c) {
			continue
		}
		if a.Kind != NoLeader {
			return r.Strict(c)
		}
		extended = true
	}
	if !extended || r.Detect <= 0 {
		return r.Strict(c)
	}
	return c.Add(r.Detect + r.LockDelay/2)
}

// Lost reports whether, at now, the hold must be assumed lost.
func (r Rule) Lost(now, c time.Time, failed []Attempt) bool {
	return now.After(r.Deadline(c, failed))
}

// Earliest is the earliest moment another session could hold the key: c +
// L, or c + D + L while the deadline is extended. A holder's Deadline is
// always L/2 before it.
func (r Rule) Earliest(c time.Time, failed []Attempt) time.Time {
	return r.Deadline(c, failed).Add(r.LockDelay - r.LockDelay/2)
}

// Tolerance is the longest interruption of confirmations the rule rides
// through when it is a Consul election answered with NoLeader: D + L/2,
// less one confirmation period (L/5) the last good read may lag.
func (r Rule) Tolerance() time.Duration {
	if r.Detect <= 0 {
		return r.LockDelay/2 - r.LockDelay/5
	}
	return r.Detect + r.LockDelay/2 - r.LockDelay/5
}

// EstimateElection is how long a Consul leader election can leave the
// servers without a leader, from the agent's raft heartbeat timeout
// (performance.raft_multiplier x 1 s; Consul's default multiplier is 5):
// a follower notices the loss between one and two heartbeat timeouts, and
// the first candidate usually wins its vote in well under one election
// timeout. 1 s -> 2 s (1-2 s measured); 5 s -> 10 s (7.8 s measured).
func EstimateElection(heartbeatTimeout time.Duration) time.Duration {
	return 2 * heartbeatTimeout
}
