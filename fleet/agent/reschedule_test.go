package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
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
	ev := func(ago time.Duration) cluster.RescheduleEvent {
		return cluster.RescheduleEvent{Node: "n2", At: t0.Add(-ago), Reason: "x"}
	}
	for _, tc := range []struct {
		name    string
		unit    Unit
		in      InstanceFailed
		faults  Faults
		resched bool   // else failed
		reason  string // the penalty's or the failed mark's
	}{
		{name: "first failure", unit: reschedUnit(2, time.Hour),
			in: InstanceFailed{Slot: web0, Service: "api", Reason: "3 restarts in 1m"}, resched: true, reason: "api: 3 restarts in 1m"},
		{name: "within attempts", unit: reschedUnit(2, time.Hour),
			in: InstanceFailed{Slot: web0, Reason: "r", History: []cluster.RescheduleEvent{ev(time.Minute)}}, resched: true, reason: "r"},
		{name: "attempts exhausted", unit: reschedUnit(2, time.Hour),
			in: InstanceFailed{Slot: web0, Reason: "r", History: []cluster.RescheduleEvent{ev(2 * time.Minute), ev(time.Minute)}}, reason: "rescheduled 3 times: r"},
		{name: "exhausted, the limit ignored (mutation)", unit: reschedUnit(2, time.Hour), faults: Faults{IgnoreAttempts: true},
			in: InstanceFailed{Slot: web0, Reason: "r", History: []cluster.RescheduleEvent{ev(2 * time.Minute), ev(time.Minute)}}, resched: true, reason: "r"},
		{name: "old failures out of the interval", unit: reschedUnit(2, time.Hour),
			in: InstanceFailed{Slot: web0, Reason: "r", History: []cluster.RescheduleEvent{ev(3 * time.Hour), ev(2 * time.Hour)}}, resched: true, reason: "r"},
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
				// history all the same (cluster.Fleet's).
				if (r.Reschedule != nil) != tc.unit.Reschedule || r.Failed == nil || r.Failed.Reason != tc.reason || len(records(acts, "fail")) != 1 || len(records(acts, "reschedule")) != 0 {
					t.Fatalf("want a failed release for %q: %+v %+v %v", tc.reason, r, r.Failed, acts)
				}
				if r.Reschedule != nil && len(r.Reschedule.History) != len(tc.in.History)+1 {
					t.Fatalf("history %+v", r.Reschedule.History)
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
			if n := len(rs.History); n != len(tc.in.History)+1 || rs.History[n-1] != (cluster.RescheduleEvent{Node: "me", At: t0, Reason: tc.reason}) {
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
