// Package cluster is the fleet's shared vocabulary: placement, the KV
// layout with its codecs, and the CLI's reads and writes of that layout.
// It runs nothing: no goroutine is started here. The fleet itself, what
// `mariposa run -cluster` runs, is the step machine in fleet/agent (pure)
// under fleet/executor (its I/O).
//
//   - Placement, pure: where the slots of cluster units go and when a
//     rescheduled slot may be claimed again (CLUSTER.md sections 3 and 4):
//     view.go, feasible.go, score.go, rank.go, assignranks.go, claim.go,
//     fit.go, capacity.go, reschedule.go, explain.go. No Consul, no I/O
//     (but FitSpec's reads, for mariposa plan and deploy), no clock: every function takes the view and the time it needs, so
//     every node given the same inputs computes the same answer, and tests
//     need no fake clock. fleet/agent and fleet/sim use it.
//   - The KV layout and its codecs, pure: keys.go, slotvalue.go, spec.go,
//     version.go, unitrecord.go, deployment.go, audit.go, pause.go,
//     drain.go, storm.go, volumes.go, parse.go (the answers of the watches:
//     slots, nodes, penalties, control/), and the rules the step machine
//     shares with the CLI (stepexport.go, engineexport.go, placeexport.go,
//     volexport.go). Several of these files also hold the writes of their
//     keys, next to the codec:
//   - I/O that callers run on their own goroutines: the CLI's Consul reads
//     and writes (Deploy, Promote, Watch for deploy -wait, ReadState for
//     status and why, Pause and ResumeAll, StartDrain, ResetSlot,
//     MarkHealthy, StopDeployment, PruneAudit, FitSpec, ...), FollowPauses
//     (a node without -cluster follows the fleet's pauses: a blocking loop
//     until its context ends), and the volume transfers fleet/executor
//     calls (volshare.go) and the node API's check of them
//     (AuthorizeVolume).
//
// The rest of this comment is about placement.
//
// # Placement as rank-ordered claims
//
// There is no scheduler. A unit (a service with a count, or a group with
// one) has slots 0..count-1, each a Consul lock (slots/<unit>/<k>). When a
// slot is free, every node computes from its own view who should take it,
// and the nodes claim in that order, one step apart:
//
//  1. Feasible: the unit is not paused; the node is live, not draining,
//     eligible; it passes every hard constraint; it holds fewer than
//     max_per_node slots of the unit; its free capacity covers what a slot
//     reserves (capacity.go). A Verdict says which test failed.
//  2. ScoreNode: Nomad's score components, each in [-1, 1] (affinity,
//     spread, job anti-affinity, reschedule penalty, stickiness, and load,
//     or for a unit with resources its capacity: bin-pack or spread), and
//     their mean.
//  3. Rank: feasible nodes by (score desc, HRW(unit, slot, node) desc).
//     Rendezvous hashing makes ties the same on every node and spreads
//     different slots over different nodes.
//  4. Assign: several free slots at once, by a greedy matching every node
//     repeats identically: slots ascending, each to its best node given the
//     matches before it, so k vacancies go to k different nodes when
//     max_per_node is 1. AssignRanks gives the same ranks alone (what a
//     claim needs), cheaply by node positions for a unit with no
//     constraints, affinities, spreads, resources or penalties.
//  5. ClaimDelay: rank r waits r × step (+ jitter), re-reads, claims if the
//     slot is still free; only ranks below FirstRound take part. A slot
//     still free after that opens to every feasible node in HRW order
//     (SecondRoundDelay).
//
// Safety never depends on any of this. Views may be stale or differ between
// nodes; two nodes that both believe they are rank 0 cost one failed
// acquire, because the Consul lock on the slot key decides who holds it,
// and the slot protocol (lock delay, confirmations, fencing index) decides
// when a holder must stop. Placement only decides who tries first: a wrong
// ranking costs time, never a duplicate.
//
// # Reschedules
//
// An instance that exhausts its restarts with on_exhausted = "reschedule"
// leaves its slot with a RescheduleEvent appended to the slot's value.
// NextDelay replays that history with the unit's reschedule policy
// (Nomad's: constant, exponential or fibonacci from delay, capped at
// max_delay, reset after a long enough run; attempts within interval) and
// says when the slot may be claimed again, or that it is exhausted.
//
// # Use
//
//	v := cluster.View{Nodes: nodes, Holders: holders, Penalties: penalties, Load: load, Reserved: reserved}
//	a := cluster.Assign(unit, free, v, now)
//	for k := range a {
//		me, ok := a.Of(k, self)
//		if !ok || !me.Verdict.OK {
//			continue // infeasible here: me.Verdict.Reason says why
//		}
//		wait, first := cluster.ClaimDelay(me.Rank, step, rand.Float64())
//		if !first {
//			wait, _ = cluster.SecondRoundDelay(me.HRWRank, step, rand.Float64())
//		}
//		// after wait: re-read slots/<unit>/<k>; claim it if still free
//	}
//
// Explain renders a ranking for `mariposa why`.
package cluster
