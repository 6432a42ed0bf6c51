// Package executor runs one node's fleet step machine (fleet/agent) against
// a real Consul agent: it performs the actions the machine returns and
// feeds their outcomes back to it as inputs (CLUSTER.md section 12; issue
// 26, "one executor that performs them and feeds the outcomes back"). The
// simulator (fleet/sim) performs the same actions over a model of Consul;
// this package does what the simulator's act does, for real, with the
// same operations (claimOps and releaseOps are fleet/sim's, kept in step
// by hand until the KV layout has its one codec; the confirmation read).
//
// # One goroutine changes state
//
// The loop (Executor.run) is the only caller of agent.Step and the only
// reader of the agent. Every other goroutine performs one piece of I/O
// (a transaction, a session call, a blocking query) and posts its outcome
// to the loop's inbox, an unbounded queue, so posting never blocks and a
// goroutine never waits for the loop. The instance runner (Instances) is
// called from the loop and must return at once; it reports an instance's
// start and exit with InstanceStarted and InstanceExited, which post too.
//
// # What each action does
//
//   - CreateSession: a session on Config.Node with the lock delay, TTL and
//     node checks, behavior delete (the index entries go with the locks
//     when it is invalidated). It is renewed every TTL/2 and watched (a
//     blocking query on its info): Consul saying it is gone is
//     agent.SessionLost; each renewal answered is agent.SessionRenewed
//     with its send time (stop_after counts from the last).
//   - Claim: one transaction, all or nothing: lock the slot key and its
//     index entry, delete the released mark, name the claimer in the
//     slot's claimed key (never locked: when an invalidation deletes the
//     slot key with its holder's session, status reads the slot as lost
//     with that node, cluster.ReadState). Refused for the lock delay
//     (LockDelay) or because another session holds the key (Taken); a
//     transport error, a timeout or a server error is an answer lost
//     (Lost): the claim may have been applied, and the agent releases the
//     stray when a view shows it.
//   - Release: one transaction: unlock the slot key (no lock delay),
//     delete the index entry, set the released mark and the unit's vacancy
//     key; a failed slot's (Release.Failed) also sets its failed mark
//     (cluster.FailedKey) with the "fail" audit record.
//   - Confirm: one consistent read-only transaction (get-or-empty of each
//     key, 128 per transaction) with its send time; a failure carries
//     whether the server said it had no leader (internal/holdrule). A read
//     still unanswered after lock_delay/10 (a server without a leader
//     holds it) is probed every lock_delay/10 as internal/lease probes its
//     own (lease.ServerProbe: a stale read, /v1/status/leader); a probe
//     that finds no leader is stepped at once as agent.ConfirmProbed, and
//     a read that times out is a no-leader failure only if its probes (or
//     a last one) found none (noleader.go).
//   - Start, Stop: Instances.Start and Instances.Stop.
//   - Wake: one timer, reset to the latest Wake; it steps agent.Tick.
//   - Refresh: the unit's index watch asks now instead of at its pace.
//   - Record: written to audit/ (stats.go), in the audit log's words
//     (website/operations.md): in the transaction of the action that
//     carries the decision out (agent.Audits: a claim's, a takeover's
//     included, in its Claim; a stray's or a drain's in its Release; a
//     stop-then-release's in the later Release, Release.Audit, with what
//     its handoff did), or, for a decision with no transaction, alone,
//     64 to a transaction. A failed slot's, the storm brake's and a
//     restore's are written by their own transactions (from the action);
//     a claim or update held back ("hold"), a hold lost ("lost"), a
//     drain's status and the queue are logged only (agent.Logged).
//   - TakeToken: check-session on the slot key and lock the token key
//     (its value the slot's number); ReturnToken: check-session on the
//     token and delete-cas on the take's index (a late return never
//     deletes a newer take).
//   - Update: Instances.Update, the same fencing token and session.
//   - Publish: check-session and check-index (the fencing token) on the
//     slot key, which is not written; the status key locked by the
//     session; the audit record; one transaction. The release deletes
//     the status key with the rest.
//   - MoveDeployment (the judge, slot 0's holder): check-index on the
//     record it judged, the next record, the audit record, one
//     transaction: a newer deploy written in between refuses it.
//   - With Config.Control: the claim of a slot marked released gets the
//     mark (it must still be there) and a takeover's claim the budget's
//     compare-and-set of control/takeovers (refused on that op alone:
//     ClaimDone.Budget); WriteBrake: check-not-exists and set
//     control/storm; PublishDrain: the node's drain status; CheckHeld: a
//     consistent read of the slot keys, as Confirm. Every claim checks
//     that the slot's failed mark does not exist (Claim.CheckFailed;
//     refused on that op alone: ClaimDone.Failed); HoldRestarts goes to
//     the Instances if they are a RestartHolder (the pause's held
//     restarts); PublishIntents writes the node's queue
//     (cluster.IntentsKey) or deletes it when empty. ResetSlot is
//     mariposa reset UNIT/K for such a fleet: the mark deleted,
//     check-index, with the "reset" audit record.
//   - With Config.Volumes (volumes.go): Restore readies a claimed slot's
//     volumes with internal/volume before its Start (cluster.ChooseData
//     on the handoff at cluster.HandoffKey and this node's copy; a
//     restored handoff acknowledged with the audit record; a new Restore
//     of the slot cancels and waits for the one on its way); PushHandoff
//     snapshots the stopped volumes and sets the handoff in a transaction
//     guarded by check-session and check-index (the fencing token) on the
//     slot key, before the Release; PushCopies pushes the periodic
//     copies (cluster.PushCopies), which on_missing = "latest" restores
//     (cluster.RestoreLatest); the volumes belong to Volumes.Owner (hooks
//     run as it). A stopping executor ends once the handoffs it published
//     while stopping are acknowledged (bounded), or records
//     handoff-unserved.
//
// # What it tells operators
//
// The loop publishes, after each batch of inputs, a snapshot of the
// agent's state (stats.go): Stats, a cluster.FleetStats (for metrics'
// mariposa_fleet_*), and Waiting, the liveness check's lines (when this
// node claims each free slot it is placed for, or why not). Both read an atomic
// pointer: a scrape never waits for the loop. Config.OnClaim is told each
// claim this node makes, with how long the slot was vacant as the agent
// saw it (the claim-delay histogram), from the loop.
//
// An answer for a session that is no longer the agent's (a claim sent
// before the session was lost) is dropped: taken as the answer of a later
// claim of the same slot, it would start an instance on a hold not proven.
//
// # Watches
//
// Per unit: its index (GET .../held/<unit>/?keys), paced by the loop after
// each answer (no sooner than 100 ms after the last, 1 s where the agent
// is Idle in the unit), its vacancy key (a release sets it: the index is
// asked at once) and its deployment prefix (record, statuses, tokens:
// agent.DeployAnswer; the index's first answer waits for its first, so
// that a slot starts at its target version). With more units than
// Config.Buckets (16), they are watched in buckets of neighbours by name,
// each bucket's three queries under its names' common prefix, and a unit
// hears what changed for it (pool.go): a node's connections stay bounded
// (3 x Buckets + MaxRequests + 5 and the confirmations: 72 by default)
// whatever its units, Consul allowing 200 per client address. A watch
// whose query failed tells the agent agent.WatchResumed before its next
// answer (with Config.Control). With Config.Control,
// control/ (agent.ControlAnswer). For the fleet: the catalog entries of the service
// (its members) and the health of its instances filtered by Consul to the
// ones not passing; their combination is agent.NodesAnswer, with each
// member's node meta and registration meta (attributes, capacity) from
// the first. For placement (place.go): penalty/ (agent.PenaltiesAnswer)
// and, once per unit whose volumes keep data on the node, its slot keys'
// last holders (agent.PreviousAnswer); a unit's index answers wait for
// both. And one blocking query per service the units' placements name
// (service.<name>: its catalog entries, agent.ServicesAnswer), started
// and stopped with the units; the agent holds such a unit's claims until
// each has answered. The units come from the caller (SetUnits; agent.UnitOf);
// a change takes effect once the members and control/ have been read after
// it (fresh.go: the watches may lag the deployment that changed them).
//
// # Stopping
//
// Stop is graceful: the agent is told there are no units, so it stops each
// instance and releases its slot once the instance has exited (a released
// key has no lock delay: another node takes it at once); then the session
// is destroyed. Kill abandons everything as a crash would: no release, no
// destroy, instances left to the caller (a crashed mariposa's children die
// by the parent-death signal). Handover (adopt.go) is an upgrade in place's
// stop: the loop parks after reporting the session and the holds (each
// exclusive one confirmed afresh), nothing released or destroyed; the next
// image's executor takes them with Config.Adopt: the session renewed at
// once and watched, never created, the holds running without a claim.
//
// A frozen process needs no clock-gap detection of its own: every step
// checks the holds' deadlines against its now, so the first step after a
// freeze (its overdue Wake, or the late answer of a read sent before it)
// finds them lost, and a late answer confirms nothing past its send time.
//
// Config.TTL goes to the agent too: a non-exclusive unit's stop_after
// stops its instances when the session has not been renewed for TTL/2 +
// stop_after, and node_lost_after and stop_after hold a lost slot back
// from the other nodes (agent/stopafter.go).
//
// Not here yet (see website/internals/fleet-agent.md): a renewal that has
// failed for a whole TTL does not end the session (only Consul saying it
// is gone does; the exclusive holds are guarded by the watchdog anyway). A bucket
// shared by several units answers with all of them (pool.go: about U/B
// units' bytes an answer instead of one; fleet/sim -buckets measures it).
// ServiceFailed reads the slot's history before the agent hears the
// failure; a reschedule's release writes the penalty, the history and
// the delay's mark and guard (agent.DelayKey, agent.DelayGuardKey).
package executor
