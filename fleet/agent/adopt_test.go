package agent

import (
	"reflect"
	"testing"
	"time"
)

var (
	adDB  = SlotID{"db", 0}
	adWeb = SlotID{"web", 0}
)

// adopted is an agent started from an upgrade's handover at t0: db/0
// exclusive (last confirmed by the previous image 100 ms before), web/0 not.
func adopted(t *testing.T) (*machine, []any) {
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Adopt: &Adopt{Session: "s-old", Slots: []AdoptSlot{
		{Slot: adDB, Index: 42, Exclusive: true, Version: "v1", Confirmed: t0.Add(-100 * time.Millisecond)},
		{Slot: adWeb, Index: 50},
	}}})}
	return m, m.step(Tick{})
}

func adoptUnits() UnitsAnswer {
	return UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}, {Name: "web", Count: 2, MaxPerNode: 2}}}
}

// The holds handed over run on under the same session: no session is
// created, nothing is claimed or started, the exclusive hold is confirmed
// at once, and a slot the session holds that was not handed over is a
// stray, released.
func TestAdoptedHoldsRunWithoutClaim(t *testing.T) {
	m, acts := adopted(t)
	if _, ok := find[CreateSession](acts); ok {
		t.Fatalf("a session created: %v", acts)
	}
	c, ok := find[Confirm](acts)
	if !ok || c.Session != "s-old" || !reflect.DeepEqual(c.Slots, []SlotID{adDB}) {
		t.Fatalf("the exclusive hold not confirmed at once: %+v %v", c, ok)
	}
	acts = append(acts, m.step(adoptUnits())...)
	acts = append(acts, m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me", "other"}}})...)
	acts = append(acts, m.step(slots("db", 60, Slot{K: 0, Node: "me", ModifyIndex: 60}))...)
	acts = append(acts, m.step(slots("web", 61, Slot{K: 0, Node: "me", ModifyIndex: 61}, Slot{K: 1, Node: "me", ModifyIndex: 61}))...)
	for _, a := range acts {
		switch a := a.(type) {
		case Claim:
			if a.Slot == adDB || a.Slot == adWeb {
				t.Fatalf("an adopted slot claimed again: %+v", a)
			}
		case Start, Stop, Update:
			t.Fatalf("an adopted instance touched: %+v", a)
		case Release:
			if a.Slot != (SlotID{"web", 1}) {
				t.Fatalf("released %v", a.Slot)
			}
		}
	}
	r, ok := find[Release](acts)
	if !ok || r.Slot != (SlotID{"web", 1}) || r.Session != "s-old" {
		t.Fatalf("the stray not released: %+v %v", r, ok)
	}
	held := m.a.Held()
	if held[adDB] != Running || held[adWeb] != Running {
		t.Fatalf("holds: %v", held)
	}
}

// The previous image's last confirmation bounds the exclusive hold: with
// no answer, the instance is killed at that confirmation + lock_delay/2;
// an answer moves the deadline as for any hold.
func TestAdoptedHoldKeepsTheOldDeadline(t *testing.T) {
	t.Run("no answer", func(t *testing.T) {
		m, _ := adopted(t)
		m.step(adoptUnits())
		m.now = t0.Add(399 * time.Millisecond)
		if s, ok := find[Stop](m.step(Tick{})); ok {
			t.Fatalf("killed early: %+v", s)
		}
		m.now = t0.Add(400 * time.Millisecond)
		s, ok := find[Stop](m.step(Tick{}))
		if !ok || !s.Kill || s.Slot != adDB {
			t.Fatalf("not killed at the old confirmation + lock_delay/2: %+v %v", s, ok)
		}
	})
	t.Run("confirmed", func(t *testing.T) {
		m, _ := adopted(t)
		m.step(adoptUnits())
		m.now = t0.Add(20 * time.Millisecond)
		m.step(ConfirmDone{Sent: t0, Held: map[SlotID]bool{adDB: true}})
		m.now = t0.Add(450 * time.Millisecond)
		if s, ok := find[Stop](m.step(Tick{})); ok {
			t.Fatalf("killed though confirmed: %+v", s)
		}
		m.now = t0.Add(500 * time.Millisecond)
		if s, ok := find[Stop](m.step(Tick{})); !ok || !s.Kill {
			t.Fatalf("not killed at the new confirmation + lock_delay/2: %+v %v", s, ok)
		}
	})
}

// A hold Consul no longer shows as the session's is lost: killed, not
// released.
func TestAdoptedHoldNotOursIsLost(t *testing.T) {
	m, _ := adopted(t)
	m.step(adoptUnits())
	m.now = t0.Add(20 * time.Millisecond)
	acts := m.step(ConfirmDone{Sent: t0, Held: map[SlotID]bool{}})
	s, ok := find[Stop](acts)
	if !ok || !s.Kill || s.Slot != adDB {
		t.Fatalf("not killed: %v", acts)
	}
	if r, ok := find[Release](acts); ok {
		t.Fatalf("released: %+v", r)
	}
	// The other, seen held by another node since: lost too.
	acts = m.step(slots("web", 70, Slot{K: 0, Node: "other", ModifyIndex: 70}))
	if s, ok := find[Stop](acts); !ok || !s.Kill || s.Slot != adWeb {
		t.Fatalf("web/0 held by another node, not killed: %v", acts)
	}
}

// Before its units are heard, an adopted agent does not stop its holds
// for want of them (the executor gives the units once read).
func TestAdoptedHoldsWaitForTheUnits(t *testing.T) {
	m, _ := adopted(t)
	m.now = t0.Add(10 * time.Millisecond)
	acts := m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me"}}})
	acts = append(acts, m.step(ConfirmDone{Sent: t0, Held: map[SlotID]bool{adDB: true}})...)
	if s, ok := find[Stop](acts); ok {
		t.Fatalf("stopped before the units: %+v", s)
	}
	// The units without web: web/0 is stopped (and released) then.
	acts = m.step(UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}}})
	if s, ok := find[Stop](acts); !ok || s.Slot != adWeb || s.Kill {
		t.Fatalf("web/0 not stopped once its unit is gone: %v", acts)
	}
}

// Handover is what Adopt takes: an agent started from it hands over the
// same again.
func TestHandoverRoundTrip(t *testing.T) {
	m, _ := adopted(t)
	m.step(adoptUnits())
	m.now = t0.Add(20 * time.Millisecond)
	m.step(ConfirmDone{Sent: t0, Held: map[SlotID]bool{adDB: true}})
	h := m.a.Handover()
	want := Adopt{Session: "s-old", Slots: []AdoptSlot{
		{Slot: adDB, Index: 42, Exclusive: true, Version: "v1", Confirmed: t0},
		{Slot: adWeb, Index: 50},
	}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("handover %+v, want %+v", h, want)
	}
	b := New(Config{Node: "me", Seed: 2, Adopt: &h})
	if got := b.Handover(); !reflect.DeepEqual(got, want) {
		t.Fatalf("again %+v, want %+v", got, want)
	}
	// A fresh agent's claimed hold is handed over with its token.
	n := newMachine(t, Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1})
	w, _ := find[Wake](n.step(slots("db", 5)))
	n.now = w.At
	c, _ := find[Claim](n.step(Tick{}))
	n.step(ClaimDone{Slot: c.Slot, OK: true, Index: 77})
	n.step(InstanceStarted{Slot: c.Slot})
	got := n.a.Handover()
	if got.Session != "s-me" || len(got.Slots) != 1 || got.Slots[0].Index != 77 || !got.Slots[0].Exclusive || !got.Slots[0].Confirmed.Equal(w.At) {
		t.Fatalf("handover of a claimed hold: %+v", got)
	}
}
