// Package consulmodel is a deterministic, in-memory model of the parts of
// Consul the fleet uses, for the fleet's simulator (CLUSTER.md section 12).
// It is pure: no goroutines, no clock, no I/O. Every call that depends on
// time takes `now`, and session IDs come from a counter, so the same calls
// give the same answers, byte for byte.
//
// What it models, following Consul's state store (agent/consul/state: kvs.go,
// txn.go, session.go) and the leader's pre-apply checks:
//
//   - KV entries with CreateIndex, ModifyIndex, LockIndex, Flags and
//     Session; one Raft index per write, shared by every key a
//     transaction changes; a set that changes nothing keeps ModifyIndex;
//     deletes leave tombstones so a prefix's index never slides back.
//   - Transactions (KVTxn): set, cas, lock, unlock, get, get-or-empty,
//     get-tree, delete, delete-cas, check-index, check-session,
//     check-not-exists; all or nothing; at most MaxTxnOps operations; every
//     failing operation reported with its index, as Consul does; a lock
//     during a key's lock delay refused before the write is proposed (no
//     Raft index used); any other failure uses a Raft index and changes
//     nothing; a transaction of reads only is no Raft write.
//   - Sessions: node, checks (serfHealth by default), lock delay, behavior
//     release or delete, TTL. Invalidation (destroy, TTL expiry, a bound
//     check going critical) releases or deletes the keys the session holds
//     in one Raft write and sets each key's lock delay. A TTL session
//     expires between TTL and 2 x TTL after its last renewal (Consul's
//     leader arms its timer at 2 x TTL); a new leader re-arms every timer.
//   - Blocking queries: Get returns the KV table's index, List the
//     prefix's (the highest index of its entries and tombstones, else the
//     table's), as Consul computes X-Consul-Index; Commits reports each
//     write's index and keys so a simulator can wake exactly the watchers
//     whose answer changed.
//   - The catalog's health of a service (the `mariposa` service and its
//     checks, per node) with a per-service index.
//   - Leadership: without a leader every write and every consistent read
//     fails ("No cluster leader"); stale reads are served.
//
// What it does not model: ACLs, tombstone reaping, the agent's
// anti-entropy, gossip (the simulator computes failure detection from
// Consul's formula), and network faults (the simulator's scheduler drops,
// delays and reorders calls and answers).
//
// The differential test (diff_test.go) runs random sequences of the KV,
// session and transaction operations the fleet uses against this model and
// against a real Consul agent and compares every outcome; the model is
// trusted only where they agree.
package consulmodel
