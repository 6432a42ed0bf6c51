// Package leader elects one leader among the instances of a service through
// a Consul session and a lock on a KV key, and tells the leader, before any
// other instance could take the lock, that it must stop its leader-only work.
//
// # API
//
// An Elector contends for one key until its context ends. It is a hold on a
// node's lease (internal/lease): with Config.Lease, the node's shared
// session, confirmed in one read per round with the node's other holds;
// without, a lease of its own with a new session for every term.
//
//	leases := lease.NewManager(lease.Config{Client: c, Node: node,
//		Checks: []string{"mariposa-" + node + ":mariposa"}})
//	e := leader.New(leader.Config{Lease: leases.Lease(ttl, lockDelay),
//		Key: "mariposa/leader/web", Value: []byte(serviceID)})
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
// After a term the lock is released and Run contends again. A session that
// was lost (invalidated, or not confirmed in time) is never used again: the
// lease retires it, and every hold under it ends with it. With a lease of
// its own the elector uses a new session for every term, as before; with a
// shared lease, the same session contends again after a voluntary end or
// after the key alone was lost. When Consul cannot be reached to release
// and destroy a retired session, the lease keeps trying before it creates
// the next one (a live session nobody renews would hold the lock until its
// TTL ran out twice). When Run's context ends, Run releases the lock (after
// onTerm returned) and, with a lease of its own, destroys the session before
// returning.
//
// Term.Index is the fencing token: the lock key's ModifyIndex right after
// this instance acquired it (MARIPOSA_LEADER_INDEX). It is a Raft index, so
// it only grows across terms, and a Consul transaction that starts with
// {"KV": {"Verb": "check-index", "Key": key, "Index": index}} or with
// {"KV": {"Verb": "check-session", "Key": key, "Session": session}} fails as
// soon as the lock has left this term (check-session: this session, which,
// shared, may hold the key again later). ModifyIndex rather than LockIndex
// because check-index compares ModifyIndex; LockIndex is in Term too.
//
// Lookup reports who holds a key, for status and for tag mode.
//
// # Safety
//
// The argument is the lease's (see internal/lease): if a consistent read
// sent at time s showed the key held by the session, nobody else can hold
// it before s + lock_delay, because Consul starts lock_delay in the same
// Raft entry that invalidates a session. The lease confirms every held key
// of a session in one consistent read every lock_delay/5, and one watchdog
// ends every term whose last confirmation is older than lock_delay/2, so
// Lost and Expired close at least lock_delay/2 before another instance could
// lead (Term.Deadline), in every case where this process can act. A process
// frozen for longer (SIGSTOP, VM pause) is the exception: on resume the
// watchdog ends the term at once, and for the frozen window the fencing
// token (check-index with Term.Index) is the guarantee. With a shared lease
// Term.Session is the node's session, which may hold the key again in a
// later term, so check-session does not tell two terms apart; check-index
// does.
//
// A Consul leader election does not end a term: while the servers' own
// answers show they cannot reach a Raft leader, the watchdog's bound
// extends from lock_delay/2 to D + lock_delay/2 after the last
// confirmation, D the gossip's failure-detection floor (Config.Detect; by
// default read from the agent: 4s with Consul's defaults). See
// internal/holdrule for the argument and internal/lease for the evidence.
//
// Every bound is a fraction of lock_delay, not of the session TTL: the TTL
// only decides how long a silent crash takes to free the lock, never safety.
// A lock_delay below 500ms leaves little room for scheduling delays and makes
// terms end spuriously (safe, but disruptive).
package leader
