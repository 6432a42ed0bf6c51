// Package agent is a fleet node's decisions as one step machine (CLUSTER.md
// section 12), in the manner of supervisor/decide.go and etcd's raft:
// Step(now, input) changes the agent's state and returns actions as data;
// it never blocks, never reads a clock and never talks to Consul. One
// executor per node performs the actions and feeds their outcomes back as
// inputs; the simulator (fleet/sim) runs the same Step for every node over
// a model of Consul (fleet/consulmodel), on simulated time.
//
// It holds the slot protocol (CLUSTER.md section 3): the node's session,
// rank-ordered claims (placement.Assign's ranks by AssignRanks over the
// inputs a placement.View has, the nodes of the services a placement names
// among them, place.go; ClaimDelay,
// SecondRoundDelay), the
// hold, the exclusive holder's confirmations and watchdog, scale-down,
// strays (a claim Consul applied whose answer was lost) and the loss of
// the session; deployments (section 5, deploy.go): rolling updates
// under rollout tokens, canaries and promotion, health judged over
// min_healthy_time and healthy_deadline, auto_revert; and, with
// Config.Control (ops.go), pause, drain, the storm brake and the takeover
// budget from the watch on control/; volumes (volumes.go): a claimed
// slot whose unit has volumes restores its data before its instance
// starts, and a slot given up gracefully publishes its handoff before its
// release, on cluster's keys and codec (which copy a new holder starts
// from is cluster.ChooseData's, applied where the data is); a running
// hold of a unit with replicas pushes its periodic copies every
// Unit.CopyEvery (PushCopies, one at a time); a slot whose
// instance failed for good, held by every node until mariposa reset
// (reset.go); the pause's held restarts and the node's queue
// (intents.go); with restart.on_exhausted = "reschedule", a failed
// instance's slot moves with its penalty and history, and is claimed
// again only after its reschedule delay (a mark in the unit's index,
// DelayKey, and its guard, DelayGuardKey), or fails once the history
// exhausts its attempts; a group fails as one (reschedule.go);
// an upgrade in place (adopt.go): Config.Adopt starts the agent with the
// previous image's session and holds running, no claim, each exclusive
// hold bounded by that image's last confirmation, and Handover says what
// to hand over.
//
// Each decision comes with its Record, which Audits (records.go) places
// in the transaction that carries it out or alone; Stats and Waiting
// (stats.go) say what the node knows and waits for, reading only.
//
// # A held slot
//
//	 Claim sent
//	     |
//	+----v-----+  refused / answer lost    (free again; a stray is
//	| claiming |-------------------------> released when seen)
//	+----+-----+
//	     | claimed (term index = the key's ModifyIndex)
//	     |                     +-----------+  restore failed, or scaled
//	     |-------------------->| restoring |  down: to handing-off, no
//	     | unit with volumes:  +-----+-----+  Stop (no instance); it
//	     | Restore                   |        passes on the handoff it
//	     |     restore done: Start   |        was to restore
//	+----v-----+<--------------------+
//	| starting |  Start
//	+----+-----+
//	     | instance started
//	+----v-----+  the slot's target version differs: a rollout
//	| running  |  token, the status says the new version, Update
//	+----+-----+--------------------------+
//	     |     ^                     +----v-----+
//	     |     +---------------------| updating | stop, start at the new
//	     |       instance started    +----------+ version, same token
//	     |
//	     | scaled down / unit removed: Stop    | watchdog (exclusive: no
//	+----v-----+                               | confirmation for
//	| stopping |<------------------------------+ lock_delay/2), session
//	+----+-----+                                 lost, key not ours:
//	     | instance exited                       Stop{Kill}, no release
//	     |                        +-------------+
//	     |----------------------->| handing-off |  no answer: sent again,
//	     | unit with volumes:     +------+------+  the release waits
//	     | PushHandoff                   |
//	     |   handed off, or refused:     |
//	     |   Release                     |
//	+----v------+<-----------------------+
//	| releasing | Release: unlock the key (no lock delay)
//	+----+------+ (only when the hold is still ours)
//	     | released
//	    gone
//
// A non-exclusive slot whose session is lost keeps its instance running
// (an orphan) until another node holds the slot, then stops it; its node
// claims it back with its next session as soon as the index shows it free
// (the instance runs on), and a unit's stop_after stops it once the
// session has not been renewed for TTL/2 + stop_after, as it stops a
// held one cut off from Consul. Other nodes take over a slot lost by an
// invalidation after node_lost_after, and after stop_after's bound
// (stopafter.go). A hold
// restoring or handing off has no instance: lost, it is dropped (and the
// unit looked at again: Consul may still show it this session's, a stray
// to release).
//
// # Deployments
//
// A unit's deployment is one record (RecordKey: the version, where it
// comes from, the stable version, the status, the canary phase), its
// holders' statuses (StatusKey) and its rollout tokens (TokenKey), all
// under DeployPrefix (cluster.UnitsPrefix: units/<unit>/, apart from
// the deployments' specs under deploy/) and read by one watch
// (DeployAnswer). Each has one
// writer:
//
//   - the record: the operator writes a new deployment or a promotion;
//     while it runs, only the judge moves it: the holder of the unit's
//     slot 0 (Judge: promoted, successful, failed, or failed and reverted
//     in the same record), by a check-index on the record's ModifyIndex,
//     with its audit record in the same transaction (MoveDeployment). Two
//     nodes that both think they hold slot 0, or the operator deploying
//     at the same moment, are settled by that check: one write wins, the
//     others are refused and look again on a newer view.
//   - a slot's status: its holder only, about its own hold: the version
//     it moves to (before the instance changes, so that no deployment is
//     judged on a health the slot had at another version), healthy after
//     min_healthy_time without a break (InstanceUnhealthy starts it over;
//     said by every hold, a deployment running or not: status counts a
//     slot claimed again once it is), or failed
//     after healthy_deadline (Publish). It is
//     fenced, check-session and check-index (the fencing token) on the
//     slot's lock key, and the lock key itself is never written while
//     held: MARIPOSA_SLOT_INDEX stays valid across every update.
//   - a rollout token: the holder of the slot it names, locked by its
//     session (TakeToken; ReturnToken with delete-cas, so that a late
//     return never frees a newer take). Tokens 0 to max_parallel-1 exist,
//     so at most max_parallel instances of a unit are down for an update
//     at once, across deployments. A holder keeps its token until its
//     slot is healthy at its target, or the deployment no longer runs: an
//     instance that failed keeps it (it is still down) and moves back
//     under it when the revert comes.
//
// A slot claimed while a deployment runs starts at its target (Start's
// Version). A failure of one instance fails the deployment; with
// auto_revert, the new record deploys the stable version with no canary
// phase under the same update block.
//
// # Watches
//
// A node learns the slots from each unit's index (IndexPrefix, read with
// ?keys: IndexView), not from the slot keys' values: one key name per held
// slot naming its node, locked by the holder's session in the claim's
// transaction and deleted by the release's (which leaves a released mark)
// or with the session when it is invalidated (sessions delete their keys).
// The index is for placement only: the lock on the slot key makes one
// holder, and confirmations read the slot key itself. A slot the index
// shows freed without the mark, after showing it held, was freed by an
// invalidation and is under the lock delay; the agent remembers which.
// The live nodes come with the fleet's members less the failing
// instances; a new answer of them does not make the agent rank again
// until a unit's next answer or claim time.
//
// A node idle in a unit (Idle: no claim of it on its way or due within
// IdlePace, no stray of its own in view) hears the unit's index at most
// once per IdlePace: the fills of vacancies it will not claim. It hears
// the vacancies at once: a release sets the unit's VacancyKey, whose watch
// answers only then, and a node newly failing in the health watch that
// held slots of a unit makes the agent ask for that unit's index now
// (Refresh). The pace is lifted before a claim is due, so claims are made
// on fresh views; a stale one costs a refused claim (Taken), after which
// the slot waits for a newer view, never a second holder.
//
// # Safety
//
// Nothing here makes two holders impossible; Consul's lock on the slot key
// does, and the watchdog bounds how long an exclusive instance outlives its
// hold (internal/leader/doc.go's argument, per slot): with c the send time
// of the last consistent read that showed the hold, the instance is killed
// before c + lock_delay/2, while another session can lock the key only
// after c + lock_delay. Placement only decides who tries first.
package agent
