// Package holdrule decides until when a holder of a Consul lock may trust
// its hold once it can no longer confirm it: the one rule the lease's
// watchdog (internal/lease, so leader-mode services and a fleet's exclusive
// slots) and the fleet simulator's step machine apply. It is a pure
// function of the last confirmation c, the failed attempts to confirm
// since, the lock delay L and Consul's failure-detection floor D.
//
// # The strict rule
//
// Consul invalidates a session in a Raft write, and in the same write
// starts lock_delay on every key it held: the leader refuses to lock them
// before the invalidation's apply time + L. A consistent read sent at c
// that showed the hold was served by the leader after c, so the session was
// valid at c and nobody else can hold the key before c + L. A holder that
// stops its work by c + L/2 is safe whatever happened after c; that is the
// strict deadline, and it stays the rule after any failure this package
// does not name.
//
// # What a server's "no leader" answer adds
//
// During a Consul leader election nothing commits: no session is
// invalidated, no lock taken, and a new leader re-arms every session's TTL
// timer (initializeSessionTimers). A holder cannot see that it is an
// election, though: a server in a minority partition answers the same way
// while the majority has a leader. What the holder can see is an answer
// from its local agent that says the server side cannot reach a Raft
// leader (NoLeader): "No cluster leader", the server's (or the agent's)
// failed connection to the leader or server it knew, a stale read
// answered with X-Consul-KnownLeader: false or an X-Consul-LastContact
// longer than a follower of a live leader shows, or an empty
// /v1/status/leader. (Consul answers a consistent read with "No cluster
// leader" only after rpc_hold_timeout, 7 s: during an election a holder's
// reads are refused with the dead leader's connection errors, then held;
// internal/lease probes a held read with a stale one and a Status.Leader.)
// Such an answer proves the local agent was alive and
// answering (not stopped, not leaving: a graceful leave deregisters the
// node at once and is the one fast invalidation an agent causes) and that
// mariposa's liveness check, a TTL check its own agent runs and could sync
// only through a leader, did not change in the catalog.
//
// What is left to a leader elsewhere is to invalidate the session because
// the node's serfHealth went critical, and that needs the majority's gossip
// to declare the node dead: memberlist's suspicion timeout, whose floor is
// suspicion_mult x max(1, log10(N)) x probe_interval = 4 x 1 x 1s = 4 s
// with Consul's LAN defaults (it only grows with N, with Lifeguard's
// awareness, and while other members have not confirmed the suspicion),
// counted from the first failed probe, which comes after the node was cut
// off, which is after c (a read sent at c reached the leader). A "dead"
// heard by push-pull only makes a member suspect the node. So no leader can
// invalidate the session before c + D, and nobody can hold the key before
// c + D + L. While every failed attempt since c was a NoLeader answer, the
// deadline is c + D + L/2: the same L/2 to stop the work as the strict
// rule. Any other failure since c (a timeout with no answer, the local
// agent refusing connections, an ACL error, a malformed answer) brings
// back the strict deadline, at once if it is past. A read that shows the
// hold confirms it as before; one that shows it lost ends the hold at once.
//
// # What a timeout proves: nothing
//
// A request that gets no answer in time may be held by a server waiting
// for a leader (up to rpc_hold_timeout), waiting out the client agent's
// retry after a server went away (a jitter of up to rpc_hold_timeout/16,
// then more), queued on an overloaded agent, or lost with an agent that is
// shutting down, perhaps after a graceful leave, which invalidates the
// session at once.
// Consul does not say which, so a timeout never extends a hold: it is
// Unproven, and brings back the strict deadline. Riding an election
// therefore needs an answer within L/2 of c, and a held read must be
// probed with requests a server answers at once from its own state.
//
// A stale read is not always answered from the server's own state: a
// server serves it locally only once it has heard from a leader since it
// started (Raft's LastContact is not zero), and forwards it to the leader
// otherwise. A server started again (a rolling upgrade: stop, upgrade,
// start on the same data) knows no leader until one reaches it, so the agents that send their RPCs to it
// get every read held, stale ones too: measured, every exclusive and
// leader instance on such an agent was stopped under the strict rule.
// Status.Leader is never forwarded: the server answers its Raft leader, ""
// while it knows none, at once. That empty answer is the local agent
// relaying a server that cannot reach a leader, like "No cluster leader",
// and proves what the section above needs (the local agent alive and
// answering); it says nothing more and is not needed to say more. A
// non-empty answer proves nothing (a follower keeps a dead leader's
// address until its heartbeat timeout; the stale read's LastContact shows
// that sooner).
//
// # What the argument assumes
//
//   - Gossip and RPC fail together: a node whose gossip was already failing
//     before c (suspected by the majority while its RPCs worked) and is then
//     cut from the leader could be declared dead sooner than c + D. That is
//     two faults; the fencing token covers it as it covers a frozen process.
//   - The gossip settings are Consul's LAN defaults (D = 4 s) or Config's D
//     is set to the cluster's floor. A cluster with a faster probe_interval
//     or a lower suspicion_mult needs a smaller D; D = 0 is the strict rule.
//   - The local agent does not begin a graceful leave while a hold is
//     extended: an answer shows it was not leaving then, and a leave begun
//     later shows when its HTTP endpoint closes (the strict rule, at once),
//     which can be after its invalidation + L if a leader was elected
//     meanwhile. Stopping the agent under a holder during an election is
//     two faults.
//   - Nobody destroys the session, deletes the key or force-leaves the node
//     by hand in the majority while the node's server is in a minority.
//     mariposa never destroys another node's session.
//
// # What it buys
//
// Deadline - c = D + L/2 = 4.5 s with the defaults (L = 1 s): a Consul
// election is ridden through when it ends within that of the last good
// confirmation, which lags the election's start by up to one confirmation
// period (L/5): Tolerance, 4.3 s.
// A leader killed with raft_multiplier = 1 takes 1-2 s; with Consul's
// default raft_multiplier (5) followers notice the loss only after the
// heartbeat timeout (5-10 s), and an election takes about 10 s: riding it
// needs D + L/2 - L/5 >= E, a lock_delay of about 20 s, paid on every
// real loss (a dead node's slots and terms move lock_delay later). mariposa
// keeps L = 1 s (a killed supervisor's slot runs elsewhere within 5 s) and
// warns at start when Rule.Tolerance is below EstimateElection of the
// agent's raft timing: run the servers with raft_multiplier = 1 (Consul's
// production recommendation) or raise lock_delay.
package holdrule
