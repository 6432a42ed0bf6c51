// Package leader elects one leader among the instances of a service through
// a Consul session and a lock on a KV key, and tells the leader, before any
// other instance could take the lock, that it must stop its leader-only work.
//
// # API
//
// An Elector contends for one key until its context ends:
//
//	e := leader.New(leader.Config{Client: c, Key: "mariposa/leader/web",
//		Checks: []string{"serfHealth", "mariposa-" + node + ":mariposa"}, Value: []byte(serviceID)})
//	e.Run(ctx, func(t *leader.Term) {
//		start(t.Session, t.Index)      // leader-only work
//		<-t.Lost()                     // stop now; SIGKILL at once if <-t.Expired()
//		stop()                         // return only once the work has stopped
//	})
//
// Run calls onTerm synchronously once per term and waits for it to return.
// Lost closes when the term ends for any reason; Err says why: ErrStopped
// (Run's context ended) and ErrResigned (onTerm returned early) are voluntary,
// and the lock stays held by this instance until onTerm returns, then it is
// released, so a standby takes over at once without lock delay. Every other
// reason wraps ErrLost: leadership is, or must be assumed, gone; Expired
// closes too and Deadline says by when the leader-only work must have
// stopped. Expired can also close after a voluntary end, if the lock is lost
// while onTerm is still stopping its work.
//
// After a term, and after any error, the session is released and destroyed and
// Run contends again with a new session: a session (and with it a lock) that
// was lost is never used again. When Consul cannot be reached to release and
// destroy it, Run keeps trying before it contends again (a live session
// nobody renews would hold the lock until its TTL ran out twice). When Run's
// context ends, Run releases the lock (after onTerm returned) and destroys the
// session before returning.
//
// Term.Index is the fencing token: the lock key's ModifyIndex right after
// this instance acquired it (MARIPOSA_LEADER_INDEX). It is a Raft index, so
// it only grows across terms, and a Consul transaction that starts with
// {"KV": {"Verb": "check-index", "Key": key, "Index": index}} or with
// {"KV": {"Verb": "check-session", "Key": key, "Session": session}} fails as
// soon as the lock has left this term. ModifyIndex rather than LockIndex
// because check-index compares ModifyIndex; LockIndex is in Term too.
//
// Lookup reports who holds a key, for status and for tag mode.
//
// # Safety
//
// Consul invalidates a session when Consul decides to: its TTL ran out (Consul
// waits twice the TTL after the last renewal), a check it is bound to went
// critical (serfHealth when the node's agent is gone or cut off, mariposa's
// liveness TTL check when mariposa stopped heartbeating), or someone
// destroyed it. Invalidation releases the lock and, in the same Raft entry,
// starts lock_delay, during which the Raft leader refuses to lock the key for
// anyone. So if a read that Consul served after time s (a consistent read,
// verified by the Raft leader) shows our session holding the key, nobody else
// can hold it before s + lock_delay, whatever happens after s. The elector
// calls s the last confirmation: it is the moment this process sent the
// request, which is before Consul served it.
//
// While leader, the elector keeps confirmations recent: a blocking query on the
// key with RequireConsistent and a wait of lock_delay/5. It returns at once
// when the key changes (released by invalidation, taken by another session,
// deleted: the term is lost at once) and otherwise after the wait, each time a
// fresh confirmation. A watchdog checks every lock_delay/20 that the last
// confirmation is no older than lock_delay/2 and ends the term if it is. So in
// every case where this process can act (its agent was killed, stopped or cut
// off from the servers, the network to the agent is cut, Consul invalidated
// the session for any reason) Lost and Expired close at most about
// lock_delay/2 after the last confirmation, leaving lock_delay/2 before the
// earliest moment another instance could hold the lock (Term.Deadline). The
// leader-only work must be stopped in that half: the supervisor kills its
// child at once when Expired closes. The renewal loop (every TTL/2) also ends
// the term when Consul says the session is gone, or when no renewal succeeded
// for a whole TTL.
//
// A serfHealth-driven invalidation (agent killed, network cut between the
// agent and the servers) happens only after Serf has declared the node failed,
// seconds after the fault; by then the leader stopped getting confirmations
// through that agent and lost the term long before. The order does not matter
// for safety, which only rests on confirmations: whatever invalidated the
// session, it happened after the last confirmation.
//
// The exception is a process that cannot act: frozen by SIGSTOP or a VM pause
// for longer than lock_delay/2. Its timers do not run, so it cannot stop its
// work in time, and another instance may lead while the frozen one's child
// still runs. On resume the watchdog sees the gap on the monotonic clock (or
// the stale confirmation) and ends the term at once; a late answer to a
// request sent before the freeze never extends the term. For the frozen
// window the fencing token is the guarantee: the stale leader's guarded
// writes fail.
//
// Every bound is a fraction of lock_delay, not of the session TTL: the TTL
// only decides how long a silent crash takes to free the lock, never safety.
// A lock_delay below 500ms leaves little room for scheduling delays and makes
// terms end spuriously (safe, but disruptive).
package leader
