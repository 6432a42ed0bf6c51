package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
)

func failedCtl(slot string) cluster.Control {
	return cluster.Control{Failed: map[string]cluster.FailedRecord{slot: {Node: "n2", Reason: "restarts exhausted", At: t0, Index: 40}}}
}

// warmOps is an ops machine holding web/0, running.
func warmOps(t *testing.T, f Faults) *machine {
	web := Unit{Name: "web", Count: 1, MaxPerNode: 1}
	m := opsMachine(t, f, &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{"web", 0}: 9}}, []string{"me", "n2"}, web)
	m.step(ctlView(20, cluster.Control{}))
	m.step(slots("web", 9, Slot{K: 0, Node: "me", ModifyIndex: 9}))
	return m
}

// An instance that failed for good fails its slot: stopped, then
// released with its failed mark and the "fail" record in the same step
// (the executor writes both in the release's transaction). Held back while
// placement is paused, it goes on at the resume.
func TestInstanceFailedFailsTheSlot(t *testing.T) {
	web0 := SlotID{"web", 0}
	for _, paused := range []bool{false, true} {
		m := warmOps(t, Faults{})
		if paused {
			m.step(ctlView(21, pause("", cluster.PausePlacement)))
		}
		acts := m.step(InstanceFailed{Slot: web0, Reason: "restarts exhausted"})
		_, stopped := find[Stop](acts)
		if stopped == paused {
			t.Fatalf("paused %v: stopped %v: %v", paused, stopped, acts)
		}
		if paused {
			if h := records(acts, "hold"); len(h) != 1 || !strings.Contains(h[0].Reason, "waits for the resume") {
				t.Fatalf("no hold record: %v", acts)
			}
			if again := m.step(Tick{}); len(records(again, "hold")) > 0 {
				t.Fatalf("held back recorded again: %v", again)
			}
			acts = m.step(ctlView(22, cluster.Control{}))
			if s, ok := find[Stop](acts); !ok || s.Slot != web0 || s.Kill {
				t.Fatalf("not stopped at the resume: %v", acts)
			}
		}
		acts = m.step(InstanceExited{Slot: web0})
		r, ok := find[Release](acts)
		if !ok || r.Failed == nil || r.Failed.Node != "me" || r.Failed.Reason != "restarts exhausted" {
			t.Fatalf("paused %v: release %+v (%v), want one with the failed mark", paused, r, ok)
		}
		if rec := records(acts, "fail"); len(rec) != 1 || rec[0].Slot != web0 || !strings.Contains(rec[0].Reason, "mariposa reset web/0") {
			t.Fatalf("paused %v: fail records %v", paused, rec)
		}
		// A plain release after that is not a failure.
		if len(m.a.rs.fails) != 0 {
			t.Fatalf("failure kept: %v", m.a.rs.fails)
		}
	}
}

// A failure of a slot on its way out already (stopping for a scale-down)
// changes nothing: its release is a plain one.
func TestInstanceFailedWhileStopping(t *testing.T) {
	m := warmOps(t, Faults{})
	m.step(UnitsAnswer{Units: []Unit{{Name: "web", Count: 0, MaxPerNode: 1}}})
	m.step(InstanceFailed{Slot: SlotID{"web", 0}, Reason: "x"})
	r, ok := find[Release](m.step(InstanceExited{Slot: SlotID{"web", 0}}))
	if !ok || r.Failed != nil {
		t.Fatalf("release %+v %v", r, ok)
	}
}

// No node claims a slot control/ shows failed; the reset (the mark gone)
// lifts the hold; every claim checks the mark.
func TestFailedSlotWaitsForReset(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults Faults
		claim  bool
	}{{"failed", Faults{}, false}, {"failed ignored (mutation)", Faults{IgnoreFailed: true}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			m := opsMachine(t, tc.faults, nil, []string{"me", "n2"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
			acts := m.step(ctlView(20, failedCtl("web/0")))
			acts = append(acts, m.step(slots("web", 6, Slot{K: 0, Released: true}))...)
			m.now = m.now.Add(10 * time.Second)
			acts = append(acts, m.step(Tick{})...)
			if _, claimed := find[Claim](acts); claimed != tc.claim {
				t.Fatalf("claimed %v: %v", claimed, acts)
			}
			if tc.claim {
				return
			}
			if h := records(acts, "hold"); len(h) != 1 || !strings.Contains(h[0].Reason, "mariposa reset web/0") {
				t.Fatalf("hold records %v", h)
			}
			// The reset: the mark is gone.
			acts = m.step(ctlView(41, cluster.Control{}))
			c, claimed := find[Claim](acts)
			if !claimed {
				w, ok := find[Wake](acts)
				if !ok {
					t.Fatalf("nothing after the reset: %v", acts)
				}
				m.now = w.At
				c, claimed = find[Claim](m.step(Tick{}))
			}
			if !claimed || !c.CheckFailed {
				t.Fatalf("claim after the reset %+v %v: want one checking the mark", c, claimed)
			}
		})
	}
}

// A claim refused by the failed mark (this node heard the fail's release
// before its control/ answer showed the mark) waits for a newer answer of
// control/, which holds it back.
func TestClaimRefusedByFailedMark(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	m.step(ctlView(20, cluster.Control{}))
	m.step(slots("web", 6, Slot{K: 0, Released: true}))
	m.now = m.now.Add(5 * time.Second)
	c, ok := find[Claim](m.step(Tick{}))
	if !ok {
		t.Fatal("no claim")
	}
	m.step(ClaimDone{Slot: c.Slot, Failed: true})
	for range 3 {
		m.now = m.now.Add(time.Second)
		if c, ok := find[Claim](append(m.step(Tick{}), m.step(slots("web", 7, Slot{K: 0, Released: true}))...)); ok {
			t.Fatalf("claimed again on the same control/ answer: %+v", c)
		}
	}
	acts := m.step(ctlView(41, failedCtl("web/0")))
	m.now = m.now.Add(5 * time.Second)
	acts = append(acts, m.step(Tick{})...)
	if _, ok := find[Claim](acts); ok || len(records(acts, "hold")) != 1 {
		t.Fatalf("after the answer with the mark: %v", acts)
	}
}

// Which op of a claim's transaction is the failed mark's check, and
// when a refusal is its alone.
func TestFailedRefusal(t *testing.T) {
	logged := &TakeoverCAS{Logged: true}
	for _, tc := range []struct {
		name   string
		c      Claim
		n      int
		failed []int
		want   bool
	}{
		{"no check", Claim{}, 4, []int{3}, false},
		{"check is last", Claim{CheckFailed: true}, 5, []int{4}, true},
		{"check before the budget", Claim{CheckFailed: true, Takeover: logged}, 6, []int{4}, true},
		{"budget alone", Claim{CheckFailed: true, Takeover: logged}, 6, []int{5}, false},
		{"lock refused too", Claim{CheckFailed: true}, 5, []int{0, 4}, false},
		{"nothing failed", Claim{CheckFailed: true}, 5, nil, false},
	} {
		if got := tc.c.FailedRefusal(tc.n, tc.failed); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
