package agent

import (
	"fmt"
	"testing"
	"time"
)

// A Confirm still unanswered whose server was probed (ConfirmProbed)
// stretches an exclusive hold under internal/holdrule's rule, as
// internal/lease's held reads do: to D + lock_delay/2 from the last
// confirmation while every failure since was no-leader evidence, never
// further, and back to lock_delay/2 on any other failure.
func TestProbedElectionStretchesTheHold(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	slot := SlotID{"db", 0}
	type ev struct {
		at int // ms after the last confirmation (t0)
		in any
	}
	for _, tc := range []struct {
		name   string
		events []ev
		// The instance is killed in [killFrom, killBy] ms after t0.
		killFrom, killBy int
	}{
		{"no evidence: the strict rule", nil, 500, 600},
		{"a probe finds no leader", []ev{{300, ConfirmProbed{Sent: ms(100), NoLeader: true}}}, 4500, 4600},
		{"a probe finds a leader: proves nothing", []ev{{300, ConfirmProbed{Sent: ms(100)}}}, 500, 600},
		{"probes every lock_delay/10 add nothing past the bound", []ev{
			{200, ConfirmProbed{Sent: ms(100), NoLeader: true}},
			{2000, ConfirmProbed{Sent: ms(1900), NoLeader: true}},
			{4400, ConfirmProbed{Sent: ms(4300), NoLeader: true}},
		}, 4500, 4600},
		{"a probe sent before the last confirmation says nothing", []ev{{300, ConfirmProbed{Sent: ms(-100), NoLeader: true}}}, 500, 600},
		{"a timeout after the probe brings the strict rule back", []ev{
			{300, ConfirmProbed{Sent: ms(100), NoLeader: true}},
			{900, ConfirmDone{Sent: ms(400), Err: fmt.Errorf("context deadline exceeded")}},
		}, 900, 1000},
		{"the held read comes back late: confirmed at its send time, the probe outlives it", []ev{
			{300, ConfirmProbed{Sent: ms(250), NoLeader: true}},
			{3000, ConfirmDone{Sent: ms(200), Held: map[SlotID]bool{slot: true}}},
		}, 4700, 4800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, LockDelay: time.Second, Detect: 4 * time.Second,
				Warm: &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{slot: 9}, Exclusive: map[string]bool{"db": true}}})}
			m.step(UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}}})
			killed := -1
			for at, i := 0, 0; at <= 6000 && killed < 0; at += 50 {
				m.now = ms(at)
				var acts []any
				for ; i < len(tc.events) && tc.events[i].at <= at; i++ {
					acts = append(acts, m.step(tc.events[i].in)...)
				}
				acts = append(acts, m.step(Tick{})...)
				if s, ok := find[Stop](acts); ok && s.Slot == slot {
					if !s.Kill {
						t.Fatalf("stopped without a kill at %d ms", at)
					}
					killed = at
				}
			}
			if killed < tc.killFrom || killed > tc.killBy {
				t.Fatalf("killed at %d ms after the last confirmation, want within [%d, %d] ms", killed, tc.killFrom, tc.killBy)
			}
		})
	}
}

// A frozen process (SIGSTOP, a paused VM) that resumes long after its
// last confirmation finds its exclusive holds lost at its first step,
// whatever that step is: the deadlines are checked against the step's now,
// and a late answer to a read sent before the freeze confirms nothing past
// that read's send time, even with no-leader evidence from before the
// freeze (internal/lease's clock-gap rule, by construction).
func TestFreezeEndsTheHolds(t *testing.T) {
	slot := SlotID{"db", 0}
	for _, tc := range []struct {
		name   string
		before []any // stepped before the freeze, at t0 + 300 ms
		resume any   // the first input after the freeze
	}{
		{"a tick", nil, Tick{}},
		{"a late confirmation", nil, ConfirmDone{Sent: t0.Add(200 * time.Millisecond), Held: map[SlotID]bool{slot: true}}},
		{"a late confirmation after a no-leader probe", []any{ConfirmProbed{Sent: t0.Add(250 * time.Millisecond), NoLeader: true}},
			ConfirmDone{Sent: t0.Add(200 * time.Millisecond), Held: map[SlotID]bool{slot: true}}},
		{"a late no-leader probe", nil, ConfirmProbed{Sent: t0.Add(250 * time.Millisecond), NoLeader: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, LockDelay: time.Second, Detect: 4 * time.Second,
				Warm: &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{slot: 9}, Exclusive: map[string]bool{"db": true}}})}
			m.step(UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}}})
			m.now = t0.Add(300 * time.Millisecond)
			for _, in := range tc.before {
				m.step(in)
			}
			m.now = t0.Add(30 * time.Second) // resumed
			if s, ok := find[Stop](m.step(tc.resume)); !ok || !s.Kill || s.Slot != slot {
				t.Fatalf("the first step after the freeze did not kill the instance: %+v %v", s, ok)
			}
		})
	}
}
