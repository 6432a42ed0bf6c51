// Package placement is the fleet's pure placement: where the slots of
// cluster units go and when a rescheduled slot may be claimed again
// (CLUSTER.md sections 3 and 4). It runs nothing and reads nothing: no
// Consul, no I/O, no clock. Every function takes the view and the time it
// needs, so every node given the same inputs computes the same answer, and
// tests need no fake clock.
//
//   - view.go: what placement knows (NodeInfo, Unit, View);
//   - attr.go, feasible.go: node attributes and the hard tests (Verdict);
//   - score.go, rank.go, assignranks.go: scores, ranking, the greedy
//     assignment and its ranks alone (AssignRanks);
//   - claim.go: the claim timing of ranks (ClaimDelay, SecondRoundDelay);
//   - capacity.go, fit.go: what slots reserve and nodes offer, and how a
//     unit fits the fleet (Fit, for mariposa deploy and plan);
//   - reschedule.go: reschedule events and their delays (NextDelay);
//   - explain.go: a ranking in words (Explain, for mariposa why).
//
// It sits below the rest of the fleet and imports only schema. Package
// cluster (the KV layout, its codecs and the CLI's reads and writes)
// builds Views from what it reads (State.View, FitSpec) and keeps the
// slot values that carry RescheduleEvents; fleet/agent (the step machine)
// ranks with it over its own watches, and fleet/sim runs the same code
// over a model of Consul.
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
//	v := placement.View{Nodes: nodes, Holders: holders, Penalties: penalties, Load: load, Reserved: reserved}
//	a := placement.Assign(unit, free, v, now)
//	for k := range a {
//		me, ok := a.Of(k, self)
//		if !ok || !me.Verdict.OK {
//			continue // infeasible here: me.Verdict.Reason says why
//		}
//		wait, first := placement.ClaimDelay(me.Rank, step, rand.Float64())
//		if !first {
//			wait, _ = placement.SecondRoundDelay(me.HRWRank, step, rand.Float64())
//		}
//		// after wait: re-read slots/<unit>/<k>; claim it if still free
//	}
//
// Explain renders a ranking for `mariposa why`.
package placement
