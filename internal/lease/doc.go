// Package lease is a node's lease on Consul and the locks held under it:
// one session per node, any number of holds (leadership keys, the node
// lock, later count slots), one confirmation read per round for all of
// them, and one watchdog that ends them before anyone else could take
// their keys.
//
// # Lease
//
// A Lease owns one Consul session at a time: behavior release, TTL renewed
// every TTL/2, lock delay, bound to the node's serfHealth and to mariposa's
// liveness TTL check ("mariposa-<node>:mariposa"). Lock delay and TTL are
// properties of a session, so a node has one lease per distinct
// (session_ttl, lock_delay); Manager hands them out, and every hold with
// the defaults (10s, 1s) shares one session.
//
// The session is created when the first hold asks for it, and only once
// every check it is bound to exists in the catalog and is not critical:
// Consul refuses a session bound to a missing or critical check ("Missing
// check registration"), and on a fresh start the liveness check is
// registered moments before. The wait is normal and logged at debug level
// only (once at warn level after 30s).
//
// A session is retired (takes no new hold) when it is lost, or must be
// assumed lost: Consul says it is gone (a renewal, an acquire), no renewal
// succeeded for a whole TTL, a confirmation got too old, or the process did
// not run for a while (see Safety). Every hold under it ends at once, and
// the next hold gets a new session: a session that was lost is never used
// again. A retired session is released and destroyed once its last hold
// was released (each hold releases its key first: a released key has no
// lock delay, a destroyed session's keys have). When Consul cannot be
// reached to do so, the session is kept and cleaned up before the next
// session is created: a live session nobody renews would keep its locks
// until its TTL ran out twice. Losing one key (deleted, released by hand)
// ends only that hold; the session goes on.
//
// With Config.OneTermPerSession, a session is retired after its first term
// too: internal/leader's elector without a shared lease works that way, one
// session per term.
//
// # Holds
//
// Acquire contends for a key under the lease (a blocking query while
// another session holds it, then an acquire) and returns a Term: Lost,
// Expired, Err, Deadline, and Index, the fencing token (the key's
// ModifyIndex right after the acquisition). The owner does its guarded
// work, stops it when Lost closes (at once, with SIGKILL, when Expired
// closes), and then calls Release. A key is held at most once per lease.
//
// The node lock (AcquireNodeLock, key mariposa/nodes/<node>/supervisor,
// value: NodeInfo) is a hold like the others, so one supervisor runs per
// node; see NodeLock for what is retaken and when mariposa must exit.
//
// # Safety
//
// Consul invalidates a session when Consul decides to: its TTL ran out
// (Consul waits twice the TTL after the last renewal), a check it is bound
// to went critical (serfHealth when the node's agent is gone or cut off,
// the liveness check when mariposa stopped heartbeating), or someone
// destroyed it. Invalidation releases every lock of the session and, in the
// same Raft entry, starts lock_delay on each of those keys, during which
// the Raft leader refuses to lock them for anyone. So if a read that Consul
// served after time s (a consistent read, verified by the Raft leader)
// shows our session holding a key, nobody else can hold that key before
// s + lock_delay, whatever happens after s. The lease calls s the key's last
// confirmation: the moment this process sent the request, which is before
// Consul served it.
//
// While a session holds keys, one confirmation round every lock_delay/5
// reads all of them in one consistent read-only transaction (get-or-empty
// for each key; one transaction per 128 keys, Consul's limit), so ten holds
// cost what one does. Each key found held by the session is confirmed with
// the round's send time; a key found free, deleted or held by another
// session ends its hold at once. A round sent before a hold was acquired
// says nothing of it: that hold's first confirmation is the consistent read
// that showed its acquisition. One watchdog per session checks every
// lock_delay/20 that no hold's last confirmation is older than
// lock_delay/2 (longer during a Consul election, see below), and ends them
// all (the keys are read together, so what is
// true of one is true of all) and retires the session if one is. So in
// every case where this process can act (its agent was killed, stopped or
// cut off from the servers, the network to the agent is cut, Consul
// invalidated the session for any reason) every hold's Lost and Expired
// close at most about lock_delay/2 after its last confirmation, leaving
// lock_delay/2 before the earliest moment another session could hold its
// key (Term.Deadline). The guarded work must be stopped in that half: the
// supervisor kills its child at once when Expired closes. The renewal loop
// (every TTL/2) also retires the session when Consul says it is gone, and
// the watchdog when no renewal succeeded for a whole TTL.
//
// A hold released voluntarily keeps its key, still confirmed, until its
// owner stopped the work and called Release; only then is the key released
// (no lock delay), so the next holder starts at once and never while the
// work runs.
//
// A serfHealth-driven invalidation (agent killed, network cut between the
// agent and the servers) happens only after Serf has declared the node
// failed, seconds after the fault; by then the holds stopped getting
// confirmations through that agent and ended long before. The order does
// not matter for safety, which only rests on confirmations: whatever
// invalidated the session, it happened after the last confirmation.
//
// # Consul elections
//
// The watchdog's bound is internal/holdrule's rule, which is lock_delay/2
// after the last confirmation c unless the servers' own answers show that
// they cannot reach a Raft leader: then c + D + lock_delay/2, D the
// gossip's failure-detection floor (suspicion_mult x probe_interval, read
// from the agent's configuration; 4s with Consul's defaults). Without it,
// every Consul leader election (a server killed, a rolling upgrade) ended
// every confirmed hold of the cluster (issue 33). The argument is in
// internal/holdrule; what the lease takes as that evidence:
//
//   - a failed confirmation the local agent answered with an HTTP error
//     relaying a failure to reach the leader or a server ("No cluster
//     leader", "rpc error getting client", a refused or reset RPC
//     connection): noLeaderAnswer;
//   - a read still unanswered after lock_delay/10 (a server holds a
//     consistent read until a leader is elected, up to rpc_hold_timeout)
//     is probed every lock_delay/10 with a stale read and a
//     /v1/status/leader, which the server answers from its own state:
//     X-Consul-KnownLeader false, X-Consul-LastContact above
//     lock_delay/10, or an empty leader is evidence, counted at the
//     probe's send time (so a held read that succeeds late keeps the term).
//     The second is what a server started again (a rolling upgrade)
//     answers at once: until it hears from a leader it forwards even stale
//     reads to the leader, and holds them like consistent ones;
//     a probe that finds a leader in contact sends a second read instead,
//     once (the client agent may be waiting out a retry on a server that
//     went away).
//
// Anything else (no answer, the agent refusing connections, an ACL error)
// keeps the strict bound, at once if it is past. Lease.Rule says the rule;
// Config.Detect overrides D (negative: strict). Before its first session a
// lease warns when an election of the agent's raft timing
// (holdrule.EstimateElection of its raft heartbeat timeout) would outlast
// the rule's tolerance.
//
// The exception is a process that cannot act: frozen by SIGSTOP or a VM
// pause for longer than lock_delay/2. Its timers do not run, so it cannot
// stop its work in time, and another node may hold a key while the frozen
// one's child still runs. On resume the watchdog sees the gap on the
// monotonic clock (or the stale confirmations) and ends every hold at once;
// a late answer to a request sent before the freeze never extends a term.
// For the frozen window the fencing token is the guarantee: the stale
// holder's guarded writes fail. Use check-index with Term.Index: the
// session is the node's, shared by its holds, and the same session may
// hold a key again after one of its terms ended (a key lost alone, a
// voluntary end), so check-session alone does not tell two terms apart.
//
// Every bound is a fraction of lock_delay, not of the session TTL: the TTL
// only decides how long a silent crash takes to free the locks, never
// safety. A lock_delay below 500ms leaves little room for scheduling delays
// and makes terms end spuriously (safe, but disruptive).
package lease
