package placement

import (
	"math"
	"time"
)

// Claim timing (CLUSTER.md section 4).
const (
	// FirstRound is R: only the nodes of rank 0..R-1 claim in the first
	// round.
	FirstRound = 3
	// DefaultStep is the spacing between ranks: at least twice a p99 KV
	// write plus watch propagation.
	DefaultStep = 200 * time.Millisecond
	// SecondRoundPause is how long after the first round's last rank
	// (R × step) a slot still free opens to every feasible node.
	SecondRoundPause = time.Second
)

// maxRank bounds rank × step so that huge ranks cannot overflow.
const maxRank = 1 << 20

// ClaimDelay is how long a node of rank (Ranked.Rank) waits before it
// re-reads a free slot and claims it if still free: rank × step plus up to
// step/4 of jitter (jitter in [0, 1], supplied by the caller). Only ranks
// 0..FirstRound-1 take part in the first round; others get false and wait
// for the second round (SecondRoundDelay). step <= 0 means DefaultStep.
func ClaimDelay(rank int, step time.Duration, jitter float64) (time.Duration, bool) {
	if rank < 0 || rank >= FirstRound {
		return 0, false
	}
	step = stepOr(step)
	return time.Duration(rank)*step + jitterOf(step, jitter), true
}

// SecondRoundDelay is the delay, from the same start as ClaimDelay, at
// which a node of hrwRank (Ranked.HRWRank) claims a slot still free after
// the first round: FirstRound × step + SecondRoundPause, then every
// feasible node in HRW order with the same spacing and jitter. false for
// an infeasible node (hrwRank < 0).
func SecondRoundDelay(hrwRank int, step time.Duration, jitter float64) (time.Duration, bool) {
	if hrwRank < 0 {
		return 0, false
	}
	step = stepOr(step)
	return FirstRound*step + SecondRoundPause + time.Duration(min(hrwRank, maxRank))*step + jitterOf(step, jitter), true
}

func stepOr(step time.Duration) time.Duration {
	if step <= 0 {
		return DefaultStep
	}
	return min(step, time.Hour)
}

func jitterOf(step time.Duration, jitter float64) time.Duration {
	if math.IsNaN(jitter) || jitter <= 0 {
		return 0
	}
	return time.Duration(min(jitter, 1) * float64(step/4))
}
