package placement

import (
	"math"
	"testing"
	"time"
)

func TestClaimDelay(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		rank   int
		step   time.Duration
		jitter float64
		want   time.Duration
		ok     bool
	}{
		{0, 200 * ms, 0, 0, true},
		{1, 200 * ms, 0, 200 * ms, true},
		{2, 200 * ms, 0, 400 * ms, true},
		{2, 200 * ms, 1, 450 * ms, true}, // up to step/4 of jitter
		{1, 200 * ms, 0.5, 225 * ms, true},
		{1, 200 * ms, 7, 250 * ms, true}, // jitter clamped to 1
		{1, 200 * ms, -1, 200 * ms, true},
		{1, 200 * ms, math.NaN(), 200 * ms, true},
		{1, 0, 0, DefaultStep, true}, // step <= 0: the default
		{1, -time.Second, 0, DefaultStep, true},
		{3, 200 * ms, 0, 0, false}, // beyond the first round
		{math.MaxInt, 200 * ms, 0, 0, false},
		{-1, 200 * ms, 0, 0, false}, // infeasible
	}
	for _, c := range cases {
		got, ok := ClaimDelay(c.rank, c.step, c.jitter)
		if got != c.want || ok != c.ok {
			t.Errorf("ClaimDelay(%d, %v, %v) = %v, %v; want %v, %v", c.rank, c.step, c.jitter, got, ok, c.want, c.ok)
		}
	}
}

func TestSecondRoundDelay(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		hrwRank int
		step    time.Duration
		jitter  float64
		want    time.Duration
		ok      bool
	}{
		// R × step + 1 s, then HRW order with the same spacing.
		{0, 200 * ms, 0, 1600 * ms, true},
		{1, 200 * ms, 0, 1800 * ms, true},
		{5, 200 * ms, 1, 2650 * ms, true},
		{0, 0, 0, 1600 * ms, true},
		{-1, 200 * ms, 0, 0, false},
	}
	for _, c := range cases {
		got, ok := SecondRoundDelay(c.hrwRank, c.step, c.jitter)
		if got != c.want || ok != c.ok {
			t.Errorf("SecondRoundDelay(%d, %v, %v) = %v, %v; want %v, %v", c.hrwRank, c.step, c.jitter, got, ok, c.want, c.ok)
		}
	}
	// The second round starts after the first round's last rank, jitter included.
	last, _ := ClaimDelay(FirstRound-1, DefaultStep, 1)
	if first, _ := SecondRoundDelay(0, DefaultStep, 0); first <= last {
		t.Errorf("second round at %v, first round's last claim at %v", first, last)
	}
	// Huge ranks and steps do not overflow.
	if d, ok := SecondRoundDelay(math.MaxInt, time.Duration(math.MaxInt64), 1); !ok || d <= 0 {
		t.Errorf("huge: %v %v", d, ok)
	}
}
