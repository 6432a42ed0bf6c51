package placement

import (
	"math"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

// RescheduleEvent is one reschedule of a slot: its instance exhausted its
// restarts on Node at At. The holder appends it to the slot's value
// (`reschedules`) before it releases the slot, so the tracker outlives the
// node.
type RescheduleEvent struct {
	Node   string    `json:"node"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// NextDelay says how long after the last event of history (its At) a slot
// may be claimed again, and whether the slot has exhausted its reschedules
// (it then stays unclaimed, failed, until reset). history is in order,
// oldest first; the last event is the failure being rescheduled. Empty
// history: no delay (a released or lost slot waits for nothing here).
//
// Nomad's semantics, with history in place of its reschedule tracker:
//
//   - Attempts: unless p.Unlimited, the slot is exhausted when more than
//     p.Attempts events fall within p.Interval before now (all events when
//     Interval is 0).
//   - The first failure waits p.Delay. After that, constant keeps p.Delay;
//     exponential doubles the previous delay; fibonacci adds the two
//     previous delays (5s, 5s, 10s, 15s, 25s, …). An empty function is
//     exponential (the schema's default), an unknown one constant.
//   - Each delay is capped at p.MaxDelay (0: no cap). When a delay reaches
//     the cap and the instance that just failed had run longer than the
//     cap (from the previous failure plus its delay to this failure), the
//     series starts again from p.Delay; fibonacci then continues p.Delay,
//     p.Delay, 2 × p.Delay, ….
func NextDelay(p schema.Reschedule, history []RescheduleEvent, now time.Time) (delay time.Duration, exhausted bool) {
	if len(history) == 0 {
		return 0, false
	}
	if !p.Unlimited {
		n := 0
		cut := now.Add(-p.Interval)
		for _, e := range history {
			if p.Interval <= 0 || e.At.After(cut) {
				n++
			}
		}
		if n > p.Attempts {
			return 0, true
		}
	}
	d := delays(p, history)
	return d[len(d)-1], false
}

// delays replays the policy over history: d[i] is the delay after failure i.
func delays(p schema.Reschedule, history []RescheduleEvent) []time.Duration {
	base := max(p.Delay, 0)
	ceiling := max(p.MaxDelay, 0)
	d := make([]time.Duration, len(history))
	for i := range history {
		next := base
		if i > 0 {
			switch p.DelayFunction {
			case schema.DelayExponential, "":
				next = satAdd(d[i-1], d[i-1])
			case schema.DelayFibonacci:
				switch {
				case i < 2:
					next = base
				case d[i-2] == ceiling && d[i-1] == base:
					next = base // the series was reset: base, base, 2 × base, …
				default:
					next = satAdd(d[i-1], d[i-2])
				}
			}
		}
		if ceiling > 0 && next > ceiling {
			next = ceiling
			if i > 0 {
				// It ran from the previous failure plus its delay to now.
				gap := history[i].At.Sub(history[i-1].At)
				if gap > d[i-1] && gap-d[i-1] > ceiling {
					next = base
				}
			}
		}
		d[i] = next
	}
	return d
}

func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
