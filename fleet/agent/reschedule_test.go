package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// reschedMachine is an ops machine holding u's slot 0, running, with n2
// live beside it.
func reschedMachine(t *testing.T, f Faults, u Unit, nodes ...string) *machine {
	m := opsMachine(t, f, &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{u.Name, 0}: 9}}, nodes, u)
	m.step(ctlView(20, cluster.Control{}))
	m.step(slots(u.Name, 9, Slot{K: 0, Node: "me", ModifyIndex: 9}))
	return m
}

func reschedUnit(attempts int, interval time.Duration) Unit {
	return Unit{Name: "web", Count: 1, MaxPerNode: 1, Reschedule: true, Placement: &schema.Placement{Reschedule: schema.Reschedule{
		Attempts: attempts, Interval: interval, Delay: time.Second, MaxDelay: time.Minute, Penalty: 10 * time.Minute}}}
}

// What a failure for good does to its slot: a unit that reschedules
// releases it with this node's penalty, its history one longer and the
// "reschedule" record, until the history holds more than attempts
// failures within interval: then it fails (reset.go's path). A group
// that does not reschedule fails as one, naming its member.
func TestInstanceFailedReschedules(t *testing.T) {
	web0 := SlotID{"web", 0}
	ev := func(ago time.Duration) placement.RescheduleEvent {
		return placement.RescheduleEvent{Node: "n2", At: t0.Add(-ago), Reason: "x"}
	}
	for _, tc := range []struct {
		name    string
		unit    Unit
		in      InstanceFailed
		faults  Faults
		resched bool   // else failed
		reason  string // the penalty's or the failed mark's
		after   time.Duration
	}{
		{name: "first failure", unit: reschedUnit(2, time.Hour),
			in: InstanceFailed{Slot: web0, Service: "api", Reason: "3 restarts in 1m"}, resched: true, reason: "api: 3 restarts in 1m", after: time.Second},
		{name: "within attempts: the delay doubles", unit: reschedUnit(2, time.Hour),
			in: InstanceFailed{Slot: web0, Reason: "r", History: []placement.RescheduleEvent{ev(time.Minute)}}, resched: true, reason: "r", after: 2 * time.Second},
		{name: "attempts exhausted", unit: reschedUnit(2, time.Hour),
			in: InstanceFailed{Slot: web0, Reason: "r", History: []placement.RescheduleEvent{ev(2 * time.Minute), ev(time.Minute)}}, reason: "rescheduled 3 times: r"},
		{name: "exhausted, the limit ignored (mutation)", unit: reschedUnit(2, time.Hour), faults: Faults{IgnoreAttempts: true},
			in: InstanceFailed{Slot: web0, Reason: "r", History: []placement.RescheduleEvent{ev(2 * time.Minute), ev(time.Minute)}}, resched: true, reason: "r"},
		{name: "old failures out of the interval", unit: reschedUnit(2, time.Hour),
			in: InstanceFailed{Slot: web0, Reason: "r", History: []placement.RescheduleEvent{ev(3 * time.Hour), ev(2 * time.Hour)}}, resched: true, reason: "r", after: 4 * time.Second},
		{name: "group fails as one", unit: Unit{Name: "web", Count: 1, MaxPerNode: 1, Group: true},
			in: InstanceFailed{Slot: web0, Service: "sidecar", Reason: "3 restarts in 1m"}, reason: "member sidecar failed: 3 restarts in 1m"},
		{name: "on_exhausted fail", unit: Unit{Name: "web", Count: 1, MaxPerNode: 1},
			in: InstanceFailed{Slot: web0, Service: "api", Reason: "r"}, reason: "r"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := reschedMachine(t, tc.faults, tc.unit, "me", "n2")
			if s, ok := find[Stop](m.step(tc.in)); !ok || s.Slot != web0 || s.Kill {
				t.Fatal("the failed instance is not stopped")
			}
			acts := m.step(InstanceExited{Slot: web0})
			r, ok := find[Release](acts)
			if !ok {
				t.Fatalf("no release: %v", acts)
			}
			if !tc.resched {
				// A unit that reschedules fails with its penalty and
				// history all the same.
				if (r.Reschedule != nil) != tc.unit.Reschedule || r.Failed == nil || r.Failed.Reason != tc.reason || len(records(acts, "fail")) != 1 || len(records(acts, "reschedule")) != 0 {
					t.Fatalf("want a failed release for %q: %+v %+v %v", tc.reason, r, r.Failed, acts)
				}
				if r.Reschedule != nil && (len(r.Reschedule.History) != len(tc.in.History)+1 || !r.Reschedule.After.IsZero()) {
					t.Fatalf("history %+v, a failed slot's delay %v", r.Reschedule.History, r.Reschedule.After)
				}
				return
			}
			rs := r.Reschedule
			if r.Failed != nil || rs == nil {
				t.Fatalf("want a reschedule: %+v", r)
			}
			if rs.Reason != tc.reason || !rs.Until.Equal(t0.Add(10*time.Minute)) {
				t.Fatalf("penalty %q until %v", rs.Reason, rs.Until)
			}
			if want := t0.Add(tc.after); tc.after == 0 && !rs.After.IsZero() || tc.after > 0 && !rs.After.Equal(want) {
				t.Fatalf("claimed again from %v, want the failure + %v (placement.NextDelay)", rs.After.Sub(t0), tc.after)
			}
			if n := len(rs.History); n != len(tc.in.History)+1 || rs.History[n-1] != (placement.RescheduleEvent{Node: "me", At: t0, Reason: tc.reason}) {
				t.Fatalf("history %+v", rs.History)
			}
			if rec := records(acts, "reschedule"); len(rec) != 1 || !strings.Contains(rec[0].Reason, tc.reason) {
				t.Fatalf("reschedule records %v", rec)
			}
			if !strings.Contains(string(rs.EncodePenalty()), `"until":"`) || len(ParseRescheduleHistory(rs.EncodeHistory())) != len(rs.History) {
				t.Fatalf("codecs: %s %s", rs.EncodePenalty(), rs.EncodeHistory())
			}
		})
	}
}

// The node that rescheduled a slot does not claim it again while its
// penalty runs and another node ranks it (even one whose view of
// penalty/ is older than the vacancy, so that ranks it first and leaves
// the slot to this node's turn); alone in the fleet, it claims it.
func TestRescheduledSlotStepsAside(t *testing.T) {
	web0 := SlotID{"web", 0}
	for _, tc := range []struct {
		name   string
		nodes  []string
		faults Faults
		pen    bool // n2's penalty runs
		claims bool
	}{
		{name: "another node ranks", nodes: []string{"me", "n2"}},
		{name: "another node ranks, no step aside (mutation)", nodes: []string{"me", "n2"}, faults: Faults{NoStepAside: true}, claims: true},
		{name: "alone", nodes: []string{"me"}, claims: true},
		{name: "the other node penalized too", nodes: []string{"me", "n2"}, pen: true, claims: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := reschedMachine(t, tc.faults, reschedUnit(5, time.Hour), tc.nodes...)
			if tc.pen {
				m.step(PenaltiesAnswer{Penalties: map[string]map[string]time.Time{"web": {"n2": t0.Add(time.Hour)}}})
			}
			m.step(InstanceFailed{Slot: web0, Reason: "r"})
			if r, ok := find[Release](m.step(InstanceExited{Slot: web0})); !ok || r.Reschedule == nil {
				t.Fatalf("no reschedule: %+v", r)
			}
			m.step(ReleaseDone{Slot: web0, OK: true})
			m.step(slots("web", 10, Slot{K: 0, Released: true}))
			claimed := false
			for i := 0; i < 50 && !claimed; i++ {
				acts := m.step(Tick{})
				if c, ok := find[Claim](acts); ok && c.Slot == web0 {
					claimed = true
					break
				}
				w, ok := find[Wake](acts)
				if !ok || !w.At.Before(t0.Add(9*time.Minute)) {
					m.now = m.now.Add(time.Second)
					continue
				}
				m.now = w.At
			}
			if claimed != tc.claims {
				t.Fatalf("claimed %v within the penalty, want %v", claimed, tc.claims)
			}
			if claimed {
				return
			}
			// Its penalty over, it may claim again (at the unit's next
			// answer).
			m.now = t0.Add(11 * time.Minute)
			m.step(slots("web", 11, Slot{K: 0, Released: true}))
			for i := 0; i < 50; i++ {
				acts := m.step(Tick{})
				if c, ok := find[Claim](acts); ok && c.Slot == web0 {
					return
				}
				if w, ok := find[Wake](acts); ok && w.At.After(m.now) {
					m.now = w.At
				} else {
					m.now = m.now.Add(time.Second)
				}
			}
			t.Fatal("no claim once the penalty ended")
		})
	}
}

// A rescheduled slot is not claimed before its delay ends (its DelayKey
// in the unit's index, set by the reschedule's release): a node claims it
// at the delay's end plus its rank's delay; a delay that ended before the
// vacancy was first seen
// holds nothing back. The claim deletes the marks its view showed.
func TestRescheduleDelayHoldsTheClaim(t *testing.T) {
	name := placeUnit(t) // "top" ahead of "me" on slot 0
	mark := func(after time.Duration) string { return SlotID{name, 0}.DelayKey(t0.Add(after)) }
	released := IndexPrefix(name) + "0"
	for _, tc := range []struct {
		name   string
		keys   []string
		nodes  []string
		faults Faults
		want   time.Duration // the claim's time from t0, within the jitter
	}{
		{name: "no mark", keys: []string{released}, nodes: []string{"me"}, want: 0},
		{name: "delay 5s", keys: []string{released, mark(5 * time.Second)}, nodes: []string{"me"}, want: 5 * time.Second},
		{name: "delay 5s, the mutation that ignores it", keys: []string{released, mark(5 * time.Second)}, nodes: []string{"me"},
			faults: Faults{NoRescheduleDelay: true}, want: 0},
		{name: "delay 5s, rank 1: one step after (top, first, claims unseen)", keys: []string{released, mark(5 * time.Second)}, nodes: []string{"me", "top"},
			want: 5*time.Second + placement.DefaultStep},
		{name: "two marks: the latest", keys: []string{released, mark(2 * time.Second), mark(7 * time.Second)}, nodes: []string{"me"}, want: 7 * time.Second},
		{name: "ended before the vacancy was seen", keys: []string{released, mark(-time.Second)}, nodes: []string{"me"}, want: 0},
		{name: "an unreadable mark is no delay", keys: []string{released, IndexPrefix(name) + "0.after.x"}, nodes: []string{"me"}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &machine{t: t, a: New(Config{Node: "me", Seed: 1, Faults: tc.faults}), now: t0}
			m.step(UnitsAnswer{Units: []Unit{{Name: name, Count: 1, MaxPerNode: 1}}})
			m.step(SessionCreated{ID: "s-me"})
			m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: tc.nodes}})
			acts := m.step(SlotsAnswer{View: IndexView(name, 10, tc.keys)})
			for range 50 {
				if c, ok := find[Claim](acts); ok {
					got := m.now.Sub(t0)
					if got < tc.want || got > tc.want+placement.DefaultStep/4 {
						t.Fatalf("claimed at %v, want %v (+ jitter)", got, tc.want)
					}
					var want []string
					for _, k := range tc.keys {
						if k != released && !strings.HasSuffix(k, ".x") {
							want = append(want, k)
						}
					}
					if !slices.Equal(c.Delays, want) {
						t.Fatalf("the claim deletes %q, want %q", c.Delays, want)
					}
					return
				}
				w, ok := find[Wake](acts)
				if !ok || !w.At.After(m.now) {
					t.Fatalf("no claim and no wake at %v: %v", m.now.Sub(t0), acts)
				}
				m.now = w.At
				acts = m.step(Tick{})
			}
			t.Fatal("never claimed")
		})
	}
}

// IndexView reads a reschedule's mark beside the released mark (and
// beside a holder's entry, left by a claim made on an older view): the
// slot's After, the latest of them.
func TestIndexViewDelayMarks(t *testing.T) {
	id := SlotID{"web", 1}
	v := IndexView("web", 9, []string{"mariposa/held/web/0", "mariposa/held/web/1", id.DelayKey(t0.Add(3 * time.Second)), id.DelayKey(t0),
		"mariposa/held/web/2/n2", SlotID{"web", 2}.DelayKey(t0)})
	want := map[int]Slot{0: {K: 0, Released: true}, 1: {K: 1, Released: true, After: t0.Add(3 * time.Second)},
		2: {K: 2, Node: "n2", ModifyIndex: 9, After: t0}}
	for k, s := range want {
		if got := v.Slots[k]; got.K != s.K || got.Node != s.Node || got.Released != s.Released || !got.After.Equal(s.After) {
			t.Errorf("slot %d: %+v, want %+v", k, got, s)
		}
	}
	if len(v.Slots) != 3 || len(v.DelayKeys(1)) != 2 || len(v.DelayKeys(0)) != 0 || v.Holders[2] != "n2" || len(v.Holders) != 1 {
		t.Errorf("slots %+v, holders %v, marks of 1: %q", v.Slots, v.Holders, v.DelayKeys(1))
	}
}
