package agent

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// machine drives one agent on a fake clock, as supervisor's decide tests
// do: inputs in, actions out, nothing else.
type machine struct {
	t   *testing.T
	a   *Agent
	now time.Time
}

func newMachine(t *testing.T, units ...Unit) *machine {
	m := &machine{t: t, a: New(Config{Node: "me", Seed: 1}), now: t0}
	m.step(UnitsAnswer{Units: units})
	m.step(SessionCreated{ID: "s-me"})
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me"}}})
	return m
}

func (m *machine) step(in any) []any {
	m.t.Helper()
	return m.a.Step(m.now, in)
}

func find[T any](acts []any) (T, bool) {
	for _, a := range acts {
		if x, ok := a.(T); ok {
			return x, true
		}
	}
	var zero T
	return zero, false
}

func slots(unit string, idx uint64, ss ...Slot) SlotsAnswer {
	return SlotsAnswer{View: NewSlotsView(unit, idx, ss)}
}

// The life of an exclusive slot: claimed at its rank's time, started with
// its fencing token, confirmed, killed when confirmations stop.
func TestExclusiveSlotLife(t *testing.T) {
	m := newMachine(t, Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1})
	acts := m.step(slots("db", 5))
	if _, ok := find[Claim](acts); ok {
		t.Fatalf("claimed before its rank's time: %v", acts)
	}
	w, ok := find[Wake](acts)
	if !ok {
		t.Fatalf("no wake for the claim: %v", acts)
	}
	m.now = w.At
	c, ok := find[Claim](m.step(Tick{}))
	if !ok || c.Slot != (SlotID{"db", 0}) || c.Session != "s-me" {
		t.Fatalf("claim: %+v %v", c, ok)
	}
	m.now = m.now.Add(2 * time.Millisecond)
	acts = m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42})
	st, ok := find[Start](acts)
	if !ok || st.Index != 42 {
		t.Fatalf("start: %+v %v", st, ok)
	}
	// The first confirmation goes out at once, the next lock_delay/5 later.
	if _, ok := find[Confirm](acts); !ok {
		t.Fatal("no confirmation with the claim's answer")
	}
	first := m.now
	m.step(InstanceStarted{Slot: c.Slot})
	if p := m.a.Held()[c.Slot]; p != Running {
		t.Fatalf("phase %v", p)
	}
	m.now = first.Add(199 * time.Millisecond)
	if _, ok := find[Confirm](m.step(Tick{})); ok {
		t.Fatal("confirmation before lock_delay/5")
	}
	m.now = first.Add(200 * time.Millisecond)
	if _, ok := find[Confirm](m.step(Tick{})); !ok {
		t.Fatal("no confirmation at lock_delay/5")
	}
	m.step(ConfirmDone{Sent: m.now, Held: map[SlotID]bool{c.Slot: true}})
	sent := m.now
	view := slots("db", 9, Slot{K: 0, Node: "me", ModifyIndex: 42})
	m.step(view)
	// No answer to anything after that: killed at sent + lock_delay/2.
	m.now = sent.Add(499 * time.Millisecond)
	if s, ok := find[Stop](m.step(Tick{})); ok {
		t.Fatalf("killed early: %+v", s)
	}
	m.now = sent.Add(500 * time.Millisecond)
	s, ok := find[Stop](m.step(Tick{}))
	if !ok || !s.Kill {
		t.Fatalf("not killed at the deadline: %+v %v", s, ok)
	}
	// Its exit does not release (the hold is not known to be ours); the
	// next view that still shows the key ours finds a stray, released once.
	// Once it has exited, the key its view still shows held by its
	// session is a stray: released, once for that view.
	if _, ok := find[Release](m.step(InstanceExited{Slot: c.Slot})); !ok {
		t.Fatal("stray not released once the instance exited")
	}
	acts = append(m.step(ReleaseDone{Slot: c.Slot, OK: false}), m.step(view)...)
	if _, ok := find[Release](acts); ok {
		t.Fatal("the same view released the stray twice")
	}
}

// A read sent before the claim's answer came may have been served before
// the claim: it does not end the hold.
func TestConfirmBeforeClaimAnswered(t *testing.T) {
	m := newMachine(t, Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1})
	w, _ := find[Wake](m.step(slots("db", 5)))
	m.now = w.At
	c, _ := find[Claim](m.step(Tick{}))
	early := m.now.Add(time.Millisecond)
	m.now = m.now.Add(3 * time.Millisecond)
	m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42})
	if s, ok := find[Stop](m.step(ConfirmDone{Sent: early, Held: map[SlotID]bool{c.Slot: false}})); ok {
		t.Fatalf("an earlier read ended the hold: %+v", s)
	}
	if s, ok := find[Stop](m.step(ConfirmDone{Sent: m.now, Held: map[SlotID]bool{c.Slot: false}})); !ok || !s.Kill {
		t.Fatalf("a later read did not end it: %+v", s)
	}
}

// A slot freed by an invalidation is claimed after the lock delay plus the
// rank's delay; a released one at the rank's delay. A refusal for the lock
// delay backs off.
func TestClaimTiming(t *testing.T) {
	for _, tc := range []struct {
		released bool
		min, max time.Duration
	}{
		{true, 0, 50 * time.Millisecond},
		{false, time.Second, time.Second + 50*time.Millisecond},
	} {
		t.Run(fmt.Sprint("released=", tc.released), func(t *testing.T) {
			m := newMachine(t, Unit{Name: "web", Count: 1, MaxPerNode: 1})
			w, ok := find[Wake](m.step(slots("web", 7, Slot{K: 0, ModifyIndex: 6, Released: tc.released})))
			if !ok {
				t.Fatal("no wake")
			}
			if d := w.At.Sub(t0); d < tc.min || d > tc.max {
				t.Fatalf("claim at %v, want [%v, %v]", d, tc.min, tc.max)
			}
			m.now = w.At
			c, ok := find[Claim](m.step(Tick{}))
			if !ok {
				t.Fatal("no claim")
			}
			w, ok = find[Wake](m.step(ClaimDone{Slot: c.Slot, LockDelay: true}))
			if !ok || w.At.Sub(m.now) != 100*time.Millisecond {
				t.Fatalf("after a lock-delay refusal: %+v", w)
			}
		})
	}
}

// A node counts its own holds toward max_per_node even when its view does
// not show them (here a stale view names another holder of its slot 0).
func TestMaxPerNodeCountsOwnHolds(t *testing.T) {
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Warm: &Warm{Session: "s-me", At: t0,
		Held: map[SlotID]uint64{{"web", 0}: 9}}})}
	m.step(UnitsAnswer{Units: []Unit{{Name: "web", Count: 2, MaxPerNode: 1}}})
	m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me", "other"}}})
	var claims int
	acts := m.step(slots("web", 7, Slot{K: 0, Node: "other", ModifyIndex: 5}))
	for range 20 {
		for _, a := range acts {
			if _, ok := a.(Claim); ok {
				claims++
			}
		}
		w, ok := find[Wake](acts)
		if !ok {
			break
		}
		m.now = w.At
		acts = m.step(Tick{})
	}
	if claims != 0 {
		t.Fatalf("%d claims while holding one with max_per_node 1", claims)
	}
}

// Scaled down: stop first, release once the instance has exited.
func TestScaleDownStopsThenReleases(t *testing.T) {
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Warm: &Warm{Session: "s-me", At: t0,
		Held: map[SlotID]uint64{{"web", 1}: 9}}})}
	acts := m.step(UnitsAnswer{Units: []Unit{{Name: "web", Count: 1, MaxPerNode: 2}}})
	if s, ok := find[Stop](acts); !ok || s.Kill {
		t.Fatalf("stop: %+v %v", s, ok)
	}
	if _, ok := find[Release](acts); ok {
		t.Fatal("released before the instance exited")
	}
	if r, ok := find[Release](m.step(InstanceExited{Slot: SlotID{"web", 1}})); !ok || r.Session != "s-me" {
		t.Fatalf("release: %+v %v", r, ok)
	}
}

// Confirmations that fail with no-leader evidence stretch an exclusive
// hold to D + lock_delay/2 from its last confirmation; a timeout among
// them brings the strict lock_delay/2 back (internal/holdrule).
func TestElectionStretchesTheHold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noLeader bool
		survives time.Duration // the hold is still kept this long after c
	}{
		{"no leader", true, 4400 * time.Millisecond},
		{"timeout", false, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Detect: 4 * time.Second,
				Warm: &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{"db", 0}: 9}, Exclusive: map[string]bool{"db": true}}})}
			m.step(UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}}})
			m.now = t0.Add(200 * time.Millisecond)
			m.step(ConfirmDone{Sent: m.now, Err: fmt.Errorf("No cluster leader"), NoLeader: tc.noLeader})
			m.now = t0.Add(tc.survives)
			if s, ok := find[Stop](m.step(Tick{})); ok {
				t.Fatalf("killed at %v: %+v", tc.survives, s)
			}
			m.now = t0.Add(tc.survives + 200*time.Millisecond)
			if s, ok := find[Stop](m.step(Tick{})); !ok || !s.Kill {
				t.Fatalf("not killed by %v", tc.survives+200*time.Millisecond)
			}
		})
	}
}

// A stray whose release failed (no leader: the view does not change) is
// released again a second later, and a fresh view is asked for: the
// refusal may say the view is stale (a stray of a session since lost,
// e2e's TestFleetPlacementCutReschedule released every second for a
// minute). Mutation check: without the Refresh the test fails.
func TestStrayRetried(t *testing.T) {
	m := newMachine(t, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	view := slots("web", 9, Slot{K: 0, Node: "me", ModifyIndex: 8})
	if _, ok := find[Release](m.step(view)); !ok {
		t.Fatal("stray not released")
	}
	acts := m.step(ReleaseDone{Slot: SlotID{"web", 0}})
	if _, ok := find[Release](acts); ok {
		t.Fatal("released again at once")
	}
	if r, ok := find[Refresh](acts); !ok || !slices.Equal(r.Units, []string{"web"}) {
		t.Fatalf("no fresh view asked for after the refusal: %+v", acts)
	}
	w, ok := find[Wake](acts)
	if !ok || w.At != m.now.Add(time.Second) {
		t.Fatalf("no retry a second later: %+v", acts)
	}
	m.now = w.At
	if _, ok := find[Release](m.step(Tick{})); !ok {
		t.Fatal("not released again")
	}
}

// The index cannot say how a slot was freed (an invalidation deletes the
// holder's entry as a release does, without the released mark): a node
// that saw it held and then free without the mark waits out the lock
// delay; one that saw it released does not.
func TestIndexFreedByInvalidationWaitsLockDelay(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keys     []string
		min, max time.Duration
	}{
		{"invalidated", nil, time.Second, time.Second + 50*time.Millisecond},
		{"released", []string{SlotID{"web", 0}.ReleasedKey()}, 0, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, Unit{Name: "web", Count: 1, MaxPerNode: 1})
			m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me", "other"}}})
			m.step(SlotsAnswer{View: IndexView("web", 5, []string{SlotID{"web", 0}.IndexKey("other")})})
			w, ok := find[Wake](m.step(SlotsAnswer{View: IndexView("web", 6, tc.keys)}))
			if !ok {
				t.Fatal("no wake")
			}
			if d := w.At.Sub(t0); d < tc.min || d > tc.max {
				t.Fatalf("claim at %v, want [%v, %v]", d, tc.min, tc.max)
			}
		})
	}
}

// The index's names read back into a view: holders, released marks, and
// names it does not know skipped.
func TestIndexView(t *testing.T) {
	v := IndexView("web", 9, []string{"mariposa/held/web/0", "mariposa/held/web/1/n1", "mariposa/held/web/2/n2",
		"mariposa/held/web/x/n3", "mariposa/held/web/3/", "mariposa/held/webx/4/n4"})
	want := map[int]Slot{0: {K: 0, Released: true}, 1: {K: 1, Node: "n1", ModifyIndex: 9}, 2: {K: 2, Node: "n2", ModifyIndex: 9}}
	if len(v.Slots) != len(want) {
		t.Fatalf("slots %+v", v.Slots)
	}
	for k, s := range want {
		if v.Slots[k] != s {
			t.Errorf("slot %d: %+v, want %+v", k, v.Slots[k], s)
		}
	}
	if v.Holders[1] != "n1" || v.Holders[2] != "n2" || len(v.Holders) != 2 {
		t.Errorf("holders %v", v.Holders)
	}
}

// Confirmations go out every lock_delay/5 while the earlier ones have not
// come back (up to maxInflight), so one slow answer does not leave the
// hold unconfirmed past the watchdog.
func TestConfirmationsDoNotWaitForAnswers(t *testing.T) {
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1,
		Warm: &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{"db", 0}: 9}, Exclusive: map[string]bool{"db": true}}})}
	acts := m.step(UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}}})
	if _, ok := find[Confirm](acts); !ok {
		t.Fatalf("no first confirmation: %v", acts)
	}
	for i := 1; i <= 2; i++ {
		w, ok := find[Wake](acts)
		if !ok || w.At != t0.Add(time.Duration(i)*200*time.Millisecond) {
			t.Fatalf("confirmation %d: wake %+v (%v), want at %v", i, w, ok, t0.Add(time.Duration(i)*200*time.Millisecond))
		}
		m.now = w.At
		acts = m.step(Tick{})
		if _, ok := find[Confirm](acts); !ok {
			t.Fatalf("confirmation %d not sent at %v: %v", i, m.now, acts)
		}
	}
	// The first answer comes back now, late: the hold is confirmed from
	// its send time and lives on.
	m.step(ConfirmDone{Sent: t0.Add(200 * time.Millisecond), Held: map[SlotID]bool{{"db", 0}: true}})
	m.now = t0.Add(600 * time.Millisecond)
	if s, ok := find[Stop](m.step(Tick{})); ok {
		t.Fatalf("killed: %+v", s)
	}
}

// A unit is ranked again when a vacancy appears or a claim time comes,
// not at every answer whose free slots only shrank.
func TestRankedAgainOnlyWhenItMatters(t *testing.T) {
	calls := 0
	rank := func(u Unit, v *SlotsView, nodes *NodesView, free []int) Ranking {
		calls++
		return DefaultRank(u, v, nodes, free)
	}
	// Twenty nodes: this one is not first for either free slot (the
	// rendezvous hash is fixed), so it waits for its claim time.
	nodes := []string{"me"}
	for i := range 19 {
		nodes = append(nodes, fmt.Sprintf("n%02d", i))
	}
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Rank: rank})}
	m.step(UnitsAnswer{Units: []Unit{{Name: "web", Count: 3, MaxPerNode: 1}}})
	m.step(SessionCreated{ID: "s-me"})
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: nodes}})
	held := func(k int, n string) string { return SlotID{"web", k}.IndexKey(n) }
	m.step(SlotsAnswer{View: IndexView("web", 5, []string{held(0, "n00")})})
	if calls != 1 {
		t.Fatalf("%d rankings for the first answer", calls)
	}
	// Slot 1 filled by another node: free slots only shrank.
	m.now = m.now.Add(time.Millisecond)
	m.step(SlotsAnswer{View: IndexView("web", 6, []string{held(0, "n00"), held(1, "n01")})})
	if calls != 1 {
		t.Fatalf("ranked again when a vacancy was filled (%d)", calls)
	}
	// A new vacancy: ranked again.
	m.step(SlotsAnswer{View: IndexView("web", 7, []string{held(1, "n01")})})
	if calls != 2 {
		t.Fatalf("not ranked again for a new vacancy (%d)", calls)
	}
	// Its claim time: ranked again before it claims.
	// Another filled (not ranked), then its claim time comes: ranked
	// again, the views having changed since.
	m.now = m.now.Add(time.Millisecond)
	acts := m.step(SlotsAnswer{View: IndexView("web", 8, []string{held(1, "n01"), held(2, "n02")})})
	if calls != 2 {
		t.Fatalf("ranked again when a vacancy was filled (%d)", calls)
	}
	if _, ok := find[Claim](acts); ok || m.a.wakeAt.IsZero() {
		t.Fatalf("claimed at once, or no claim time: %v", acts)
	}
	m.now = m.a.wakeAt
	m.step(Tick{})
	if calls != 3 {
		t.Fatalf("not ranked again at its claim time (%d)", calls)
	}
}

// A claim refused because another session holds the slot is not sent
// again on the view that showed the slot free (the simulator found a node
// sending hundreds a second while its view was stale); the node asks for
// a fresh view, and claims again once a newer one still shows it free.
func TestRefusedClaimWaitsForNewerView(t *testing.T) {
	m := newMachine(t, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	w, _ := find[Wake](m.step(slots("web", 7, Slot{K: 0, ModifyIndex: 6, Released: true})))
	m.now = w.At
	c, ok := find[Claim](m.step(Tick{}))
	if !ok {
		t.Fatal("no claim")
	}
	acts := m.step(ClaimDone{Slot: c.Slot, Taken: true})
	if _, again := find[Claim](acts); again {
		t.Fatal("claimed again on the same view")
	}
	if r, ok := find[Refresh](acts); !ok || len(r.Units) != 1 || r.Units[0] != "web" {
		t.Fatalf("no refresh of web: %+v", acts)
	}
	m.now = m.now.Add(time.Millisecond)
	if _, again := find[Claim](m.step(Tick{})); again {
		t.Fatal("claimed again on the same view at a tick")
	}
	if _, ok := find[Claim](m.step(slots("web", 9, Slot{K: 0, ModifyIndex: 8, Released: true}))); !ok {
		t.Fatal("no claim on a newer view that shows the slot free")
	}
}

// Idle: a node with no claim due soon and nothing on its way hears the
// unit at the idle pace; a claim due within it, a claim on its way or a
// stray make it prompt. A node newly failing that holds slots of a unit
// makes the agent refresh that unit.
func TestIdleAndRefresh(t *testing.T) {
	nodes := []string{"me"}
	for i := range 20 {
		nodes = append(nodes, fmt.Sprintf("n%02d", i))
	}
	m := newMachine(t, Unit{Name: "web", Count: 1, MaxPerNode: 1}, Unit{Name: "db", Count: 1, MaxPerNode: 1})
	// Alone in the fleet, this node is first for web's free slot: its
	// claim is due at once.
	m.step(slots("web", 7, Slot{K: 0, ModifyIndex: 6, Released: true}))
	if m.a.Idle("web", m.now, IdlePace) {
		t.Error("idle with a claim due now")
	}
	m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: nodes}})
	m.step(slots("db", 3, Slot{K: 0, Node: "n03", ModifyIndex: 3}))
	if !m.a.Idle("db", m.now, IdlePace) {
		t.Error("full unit held by another: not idle")
	}
	// A stray of this node in the view: prompt.
	m.step(slots("db", 4, Slot{K: 0, Node: "me", ModifyIndex: 4}))
	if m.a.Idle("db", m.now, IdlePace) {
		t.Error("idle with a stray in view")
	}
	// n03 fails: it held db's slot in this node's view (now n05).
	m.step(slots("db", 5, Slot{K: 0, Node: "n05", ModifyIndex: 5}))
	acts := m.step(NodesAnswer{View: &NodesView{Index: 3, Nodes: nodes[:5], Failing: []string{"n09"}}})
	if _, ok := find[Refresh](acts); ok {
		t.Errorf("refresh for a failing node that holds nothing: %+v", acts)
	}
	acts = m.step(NodesAnswer{View: &NodesView{Index: 4, Nodes: nodes[:5], Failing: []string{"n09", "n05"}}})
	if r, ok := find[Refresh](acts); !ok || len(r.Units) != 1 || r.Units[0] != "db" {
		t.Errorf("n05 failing: refresh %+v, want db", acts)
	}
}

// A slot this node released is not a stray of the view from before the
// release, which still shows it held by this node: no second release
// (found by the executor on real Consul, where the release's answer often
// comes before the index's next answer).
func TestReleasedSlotNotAStray(t *testing.T) {
	m := newMachine(t, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	w, ok := find[Wake](m.step(slots("web", 5)))
	if !ok {
		t.Fatal("no wake for the claim")
	}
	m.now = w.At
	c, ok := find[Claim](m.step(Tick{}))
	if !ok {
		t.Fatal("no claim")
	}
	m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 6})
	m.step(InstanceStarted{Slot: c.Slot})
	m.step(slots("web", 6, Slot{K: 0, Node: "me", ModifyIndex: 6}))
	if _, ok := find[Stop](m.step(UnitsAnswer{Units: []Unit{{Name: "web", Count: 0, MaxPerNode: 1}}})); !ok {
		t.Fatal("not stopped on scale-down")
	}
	if _, ok := find[Release](m.step(InstanceExited{Slot: c.Slot})); !ok {
		t.Fatal("not released once stopped")
	}
	if acts := m.step(ReleaseDone{Slot: c.Slot, OK: true}); len(acts) > 0 {
		if r, ok := find[Release](acts); ok {
			t.Fatalf("released again on the view from before the release: %+v", r)
		}
	}
	m.now = m.now.Add(500 * time.Millisecond)
	if r, ok := find[Release](m.step(Tick{})); ok {
		t.Fatalf("released again: %+v", r)
	}
	if r, ok := find[Release](m.step(slots("web", 7))); ok {
		t.Fatalf("released again on the newer view: %+v", r)
	}
}

// A claim that got no answer (no leader, cut off) is not sent again at
// once: a node on the minority side of a partition sent hundreds a
// second; it waits a tenth of the lock delay, as a lock-delay refusal.
func TestClaimWithoutAnswerBacksOff(t *testing.T) {
	m := newMachine(t, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	w, ok := find[Wake](m.step(slots("web", 5)))
	if !ok {
		t.Fatal("no wake for the claim")
	}
	m.now = w.At
	c, ok := find[Claim](m.step(Tick{}))
	if !ok {
		t.Fatal("no claim")
	}
	m.now = m.now.Add(time.Millisecond)
	acts := m.step(ClaimDone{Slot: c.Slot, Lost: true})
	if _, ok := find[Claim](acts); ok {
		t.Fatal("claimed again at once")
	}
	m.now = m.now.Add(50 * time.Millisecond)
	if _, ok := find[Claim](m.step(Tick{})); ok {
		t.Fatal("claimed again within lock_delay/10")
	}
	m.now = m.now.Add(60 * time.Millisecond)
	if _, ok := find[Claim](m.step(Tick{})); !ok {
		t.Fatal("not claimed again after lock_delay/10")
	}
}

// A holder whose steps left its holds alone (answers of units it holds
// nothing of) still sees the next answer of its own unit and the next
// units: what reconcile found for the holds is kept only while nothing
// they read changes.
func TestHoldLookedAtAgainWhenItsUnitChanges(t *testing.T) {
	db := SlotID{"db", 1}
	for _, tc := range []struct {
		name string
		in   any
		stop bool // a Stop of db/1
		kill bool
	}{
		{"taken by another session", slots("db", 50, Slot{K: 0, Node: "x", ModifyIndex: 50}, Slot{K: 1, Node: "other", ModifyIndex: 50}), true, true},
		{"an older hold of another node", slots("db", 50, Slot{K: 0, Node: "x", ModifyIndex: 50}, Slot{K: 1, Node: "other", ModifyIndex: 30}), false, false},
		{"still ours", slots("db", 50, Slot{K: 0, Node: "x", ModifyIndex: 50}, Slot{K: 1, Node: "me", ModifyIndex: 50}), false, false},
		{"scaled down", UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, MaxPerNode: 1}, {Name: "web", Count: 2, MaxPerNode: 1}}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(Config{Node: "me", Seed: 1, Warm: &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{db: 40}}})
			a.Step(t0, UnitsAnswer{Units: []Unit{{Name: "db", Count: 2, MaxPerNode: 1}, {Name: "web", Count: 2, MaxPerNode: 1}}})
			a.Step(t0, NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me", "other", "x", "y"}}})
			a.Step(t0, slots("db", 41, Slot{K: 0, Node: "x", ModifyIndex: 41}, Slot{K: 1, Node: "me", ModifyIndex: 41}))
			for i := range 3 {
				acts := a.Step(t0, slots("web", uint64(42+i), Slot{K: 0, Node: "x", ModifyIndex: 42}, Slot{K: 1, Node: "y", ModifyIndex: 42}))
				if _, ok := find[Stop](acts); ok {
					t.Fatalf("an answer of web stopped a hold: %v", acts)
				}
			}
			s, ok := find[Stop](a.Step(t0, tc.in))
			if ok != tc.stop || (ok && (s.Slot != db || s.Kill != tc.kill)) {
				t.Fatalf("stop %+v %v, want stop %v kill %v", s, ok, tc.stop, tc.kill)
			}
		})
	}
}
