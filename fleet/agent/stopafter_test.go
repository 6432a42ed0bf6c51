package agent

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/schema"
)

func newMachineWith(t *testing.T, cfg Config, nodes []string, units ...Unit) *machine {
	cfg.Node, cfg.Seed = "me", 1
	m := &machine{t: t, a: New(cfg), now: t0}
	m.step(UnitsAnswer{Units: units})
	m.step(SessionCreated{ID: "s-me"})
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: nodes}})
	return m
}

// run steps Tick at every Wake until a T comes or until passes; it
// returns the action and when it came.
func runUntil[T any](m *machine, acts []any, until time.Time) (T, time.Time, bool) {
	for {
		if x, ok := find[T](acts); ok {
			return x, m.now, true
		}
		w, ok := find[Wake](acts)
		if !ok || w.At.After(until) {
			var zero T
			return zero, m.now, false
		}
		m.now = w.At
		acts = m.step(Tick{})
	}
}

// node_lost_after: a slot freed by an invalidation (held by x, then free
// without the released mark) is taken over by another node only
// node_lost_after after it saw it free; the lock delay alone without one;
// stop_after adds TTL/2, the longest stop and a second (CLUSTER.md
// section 3).
func TestLostSlotWaits(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lostAfter  time.Duration
		stopAfter  time.Duration
		exclusive  bool
		wantAfter  time.Duration // no claim before since + this
		wantBefore time.Duration // a claim by since + this
	}{
		{name: "lock delay only", wantAfter: time.Second, wantBefore: 3 * time.Second},
		{name: "node_lost_after", lostAfter: 20 * time.Second, wantAfter: 20 * time.Second, wantBefore: 23 * time.Second},
		{name: "stop_after", stopAfter: 2 * time.Second, wantAfter: 2*time.Second + 5*time.Second + 3*time.Second + time.Second,
			wantBefore: 14 * time.Second},
		{name: "stop_after is not an exclusive unit's", stopAfter: 2 * time.Second, exclusive: true, wantAfter: time.Second, wantBefore: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &schema.Placement{StopAfter: tc.stopAfter}
			p.Reschedule.NodeLostAfter = tc.lostAfter
			u := Unit{Name: "keep", Count: 1, MaxPerNode: 1, Exclusive: tc.exclusive, Placement: p, MaxStop: 3 * time.Second}
			m := newMachineWith(t, Config{TTL: 10 * time.Second, LockDelay: time.Second}, []string{"me", "x"}, u)
			m.step(slots("keep", 5, Slot{K: 0, Node: "x", ModifyIndex: 5}))
			m.now = m.now.Add(time.Second)
			since := m.now
			acts := m.step(slots("keep", 9, Slot{K: 0}))
			c, at, ok := runUntil[Claim](m, acts, since.Add(tc.wantBefore))
			if !ok {
				t.Fatalf("no claim by %s after the loss", tc.wantBefore)
			}
			if at.Before(since.Add(tc.wantAfter)) {
				t.Fatalf("claimed %s after the loss, want no sooner than %s", at.Sub(since), tc.wantAfter)
			}
			if c.From != "x" {
				t.Errorf("claim from %q, want x", c.From)
			}
		})
	}
}

// stop_after: a non-exclusive holder whose session was last renewed at r
// stops its instance (not a kill) at r + TTL/2 + stop_after, and releases
// the slot once it has exited; a renewal in between puts it off; without
// stop_after the instance runs on.
func TestStopAfterCutOff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stopAfter time.Duration
		renewAt   time.Duration // a renewal sent this long after the start (0: none)
		wantStop  time.Duration // after the last renewal (the session's creation at first); 0: never (within a minute)
	}{
		{name: "stops", stopAfter: 2 * time.Second, wantStop: 7 * time.Second},
		{name: "a renewal puts it off", stopAfter: 2 * time.Second, renewAt: 4 * time.Second, wantStop: 7 * time.Second},
		{name: "no stop_after", wantStop: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Unit{Name: "lazy", Count: 1, MaxPerNode: 1, Placement: &schema.Placement{StopAfter: tc.stopAfter}}
			m := newMachineWith(t, Config{TTL: 10 * time.Second, LockDelay: time.Second}, []string{"me"}, u)
			c, _, ok := runUntil[Claim](m, m.step(slots("lazy", 5)), m.now.Add(5*time.Second))
			if !ok {
				t.Fatal("no claim")
			}
			acts := m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42})
			start, renewed := m.now, t0
			acts = append(acts, m.step(InstanceStarted{Slot: c.Slot})...)
			if tc.renewAt > 0 {
				_, _, _ = runUntil[Stop](m, acts, start.Add(tc.renewAt))
				m.now = start.Add(tc.renewAt)
				acts = m.step(SessionRenewed{Sent: m.now})
				renewed = m.now
			}
			limit := start.Add(time.Minute)
			if tc.wantStop > 0 {
				limit = renewed.Add(tc.wantStop)
			}
			s, at, ok := runUntil[Stop](m, acts, limit)
			if tc.wantStop == 0 {
				if ok {
					t.Fatalf("stopped %s after the start without stop_after", at.Sub(start))
				}
				return
			}
			if !ok || s.Kill || !at.Equal(renewed.Add(tc.wantStop)) {
				t.Fatalf("stop %+v %v at %s after the last renewal, want a stop at %s", s, ok, at.Sub(renewed), tc.wantStop)
			}
			if r, ok := find[Release](m.step(InstanceExited{Slot: c.Slot})); !ok || r.Audit.Reason != cutOffReason(u) {
				t.Fatalf("release after the stop: %+v %v", r, ok)
			}
		})
	}
}

// An orphan (a non-exclusive hold whose session was lost, its instance
// running) is claimed back with the new session as soon as the index
// shows its slot free, at once, with no Start (the instance runs on), and
// named as its own last holder; held again, it is no orphan.
func TestOrphanClaimedBack(t *testing.T) {
	u := Unit{Name: "keep", Count: 1, MaxPerNode: 1, Placement: &schema.Placement{}}
	m := newMachineWith(t, Config{TTL: 10 * time.Second, LockDelay: time.Second}, []string{"me", "x"}, u)
	m.step(slots("keep", 5))
	m.step(slots("keep", 5, Slot{K: 0, Node: "x", ModifyIndex: 5})) // (held elsewhere: nothing to claim)
	c := holdKeep(t, m, m.step(slots("keep", 6)), 10*time.Second)
	m.now = m.now.Add(time.Second)
	m.step(SessionLost{})
	m.step(SessionCreated{ID: "s-2"})
	m.now = m.now.Add(time.Second)
	acts := m.step(slots("keep", 50, Slot{K: 0}))
	again, ok := find[Claim](acts)
	if !ok || again.Session != "s-2" || again.From != "me" {
		t.Fatalf("orphan not claimed back at once with the new session: %+v %v (%v)", again, ok, acts)
	}
	acts = m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 60})
	if s, ok := find[Start](acts); ok {
		t.Fatalf("started again: %+v", s)
	}
	if _, ok := find[Record](acts); !ok {
		t.Fatalf("no claim record: %v", acts)
	}
	if p := m.a.Held()[c.Slot]; p != Running {
		t.Fatalf("phase %v after the claim back", p)
	}
	// Its own view of the new hold ends nothing; a view of it free again
	// (not an orphan: no claim back) is not claimed while held.
	if _, ok := find[Stop](m.step(slots("keep", 60, Slot{K: 0, Node: "me", ModifyIndex: 60}))); ok {
		t.Fatal("stopped its own hold")
	}
}

// An orphan's claim back on its way counts toward max_per_node: with the
// other slot of its unit free too, the node claims that one only if the
// claim back is refused (the simulator at 12 nodes: a node healed from a
// cut claimed its orphan and a takeover at once and held both). And when
// both are free, the orphan is claimed back first: its instance runs on.
func TestOrphanClaimBackCountsTowardMaxPerNode(t *testing.T) {
	u := Unit{Name: "keep", Count: 2, MaxPerNode: 1, Placement: &schema.Placement{}}
	m := newMachineWith(t, Config{TTL: 10 * time.Second, LockDelay: time.Second}, []string{"me", "x"}, u)
	m.step(slots("keep", 5))
	m.step(slots("keep", 5, Slot{K: 0, Node: "x", ModifyIndex: 5}))
	c := holdKeep(t, m, m.step(slots("keep", 6, Slot{K: 0, Node: "x", ModifyIndex: 5})), 10*time.Second)
	if c.Slot.K != 1 {
		t.Fatalf("claimed %v, want keep/1", c.Slot)
	}
	m.step(slots("keep", 42, Slot{K: 0, Node: "x", ModifyIndex: 5}, Slot{K: 1, Node: "me", ModifyIndex: 42}))
	m.now = m.now.Add(time.Second)
	m.step(SessionLost{})
	m.step(SessionCreated{ID: "s-2"})
	m.now = m.now.Add(time.Second)
	// x is gone too: both slots free, this node ranked first for keep/0.
	m.step(NodesAnswer{View: &NodesView{Index: 3, Nodes: []string{"me"}, Failing: []string{"x"}}})
	acts := m.step(slots("keep", 50, Slot{K: 0}, Slot{K: 1}))
	back, ok := find[Claim](acts)
	if !ok || back.Slot != c.Slot || back.Session != "s-2" {
		t.Fatalf("orphan not claimed back first: %+v %v (%v)", back, ok, acts)
	}
	for _, a := range acts {
		if cl, ok := a.(Claim); ok && cl.Slot != c.Slot {
			t.Fatalf("claimed %v beside its orphan's claim back (max_per_node 1): %v", cl.Slot, acts)
		}
	}
	// While the claim back is on its way, nothing else of the unit, on a
	// newer view too.
	if other, _, ok := runUntil[Claim](m, m.step(slots("keep", 51, Slot{K: 0}, Slot{K: 1})), m.now.Add(30*time.Second)); ok {
		t.Fatalf("claimed %v while its claim back was on its way (max_per_node 1)", other.Slot)
	}
}

// A slot this node lost (its release refused while cut off from Consul,
// after stop_after stopped its instance) is its own even when its watches
// broke meanwhile (their next answers follow a gap: the index cannot say
// who held it): claimed back as its own, no fresh claim, no takeover,
// not held back by the storm brake.
func TestOwnLostSlotClaimedBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lostFirst: the session's loss comes before the release's
		// answer (which the executor then drops: another session's).
		lostFirst bool
	}{{name: "release refused"}, {name: "session lost during the release", lostFirst: true}} {
		t.Run(tc.name, func(t *testing.T) {
			u := Unit{Name: "lazy", Count: 1, MaxPerNode: 1, Placement: &schema.Placement{StopAfter: 2 * time.Second}}
			m := newMachineWith(t, Config{TTL: 10 * time.Second, LockDelay: time.Second, Control: true}, []string{"me", "x"}, u)
			m.step(ctlView(20, cluster.Control{Storm: &cluster.StormRecord{At: t0}}))
			c, _, ok := runUntil[Claim](m, m.step(slots("lazy", 5)), m.now.Add(5*time.Second))
			if !ok {
				t.Fatal("no claim")
			}
			acts := m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42})
			acts = append(acts, m.step(InstanceStarted{Slot: c.Slot})...)
			acts = append(acts, m.step(slots("lazy", 42, Slot{K: 0, Node: "me", ModifyIndex: 42}))...)
			if _, _, ok := runUntil[Stop](m, acts, t0.Add(7*time.Second)); !ok {
				t.Fatal("not stopped for stop_after")
			}
			if _, ok := find[Release](m.step(InstanceExited{Slot: c.Slot})); !ok {
				t.Fatal("no release")
			}
			if !tc.lostFirst {
				m.step(ReleaseDone{Slot: c.Slot}) // refused: cut off
			}
			m.step(WatchResumed{})
			m.step(SessionLost{})
			// The index answers (the slot free) before the new session
			// is made.
			m.now = m.now.Add(time.Second)
			m.step(slots("lazy", 50, Slot{K: 0}))
			again, _, ok := runUntil[Claim](m, m.step(SessionCreated{ID: "s-2"}), m.now.Add(5*time.Second))
			if !ok || again.From != "me" || again.Fresh || again.Takeover != nil {
				t.Fatalf("own lost slot claimed back as %+v %v, want a claim of its own (no fresh claim, no takeover)", again, ok)
			}
		})
	}
}

// An orphan claimed back says again that it is healthy, under the new
// hold: its status went with the old session (behavior delete), so that
// what the hold said before is said by nothing now. A deployment running
// waits for it (its judge counts the slot's status); none running, the
// status's healthy count does. Found by the simulator (TestSimulationOps,
// seed 2: a deployment never terminal, the slot of a node cut off and
// healed claimed back healthy and never said so).
//
// Mutation-checked: with reclaimDone keeping what the hold said (hd.said)
// both rows publish nothing after the claim back; with it forgotten but
// the hold not marked unsaid, the row with no deployment running does not
// (the step's fast path skips the holds).
func TestOrphanSaysHealthyAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *Deployment
	}{
		{"a deployment running", running(2, "v0", "v1")},
		{"no deployment running", &Deployment{N: 1, Version: "v1", From: "v1", Stable: "v1", Status: cluster.DeploySuccessful, Update: upd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Unit{Name: "web", Count: 1, MaxPerNode: 1, Placement: &schema.Placement{}}
			id := SlotID{"web", 0}
			m := newMachineWith(t, Config{TTL: 10 * time.Second, LockDelay: time.Second}, []string{"me", "x"}, u)
			m.step(deployView(11, tc.d, nil, nil))
			c, _, ok := runUntil[Claim](m, m.step(slots("web", 5)), m.now.Add(10*time.Second))
			if !ok {
				t.Fatal("no claim")
			}
			m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42})
			m.step(InstanceStarted{Slot: id})
			m.step(slots("web", 42, Slot{K: 0, Node: "me", ModifyIndex: 42}))
			p, _, ok := runUntil[Publish](m, m.step(InstanceHealthy{Slot: id, Version: "v1"}), m.now.Add(5*time.Second))
			if !ok || p.Kind != "healthy" || p.Index != 42 {
				t.Fatalf("the first hold did not say healthy: %+v %v", p, ok)
			}
			m.step(PublishDone{Slot: id, Index: m.a.held[id].index, Kind: "healthy", Version: "v1", OK: true})
			m.step(deployView(12, tc.d, map[int]Status{0: healthyAt("v1", 42)}, nil))
			// Cut off: the session lost with its status; healed, the
			// slot free, claimed back with the new session.
			m.now = m.now.Add(time.Second)
			m.step(SessionLost{})
			m.step(SessionCreated{ID: "s-2"})
			m.now = m.now.Add(time.Second)
			m.step(deployView(13, tc.d, nil, nil))
			again, ok := find[Claim](m.step(slots("web", 50, Slot{K: 0})))
			if !ok || again.Session != "s-2" {
				t.Fatalf("orphan not claimed back: %+v %v", again, ok)
			}
			acts := m.step(ClaimDone{Slot: id, OK: true, Index: 60})
			acts = append(acts, m.step(slots("web", 60, Slot{K: 0, Node: "me", ModifyIndex: 60}))...)
			p, _, ok = runUntil[Publish](m, acts, m.now.Add(5*time.Second))
			if !ok || p.Kind != "healthy" || p.Index != 60 || p.Session != "s-2" || p.Status.Index != 60 || p.Status.HealthyAt == nil {
				t.Fatalf("claimed back healthy, not said under the new hold: %+v %v", p, ok)
			}
		})
	}
}

// A node whose hold was lost to another node's claim (the view showed the
// other holder) and whose session went too does not take the slot as its
// own when the other holder's session is invalidated: the loss is the
// other node's, and node_lost_after applies. Mutation-checked: with the
// slot noted as this node's own loss whatever the view (noteLostOwn
// always setting ownLost), the claim comes at the lock delay.
func TestLostToAnotherIsNotOwnLoss(t *testing.T) {
	p := &schema.Placement{}
	p.Reschedule.NodeLostAfter = 20 * time.Second
	u := Unit{Name: "keep", Count: 1, MaxPerNode: 1, Placement: p, MaxStop: time.Second}
	m := newMachineWith(t, Config{TTL: 10 * time.Second, LockDelay: time.Second}, []string{"me", "x"}, u)
	c := holdKeep(t, m, m.step(slots("keep", 5)), 5*time.Second)
	// Cut off: x took the slot over; this node sees it, then its session's loss.
	m.now = m.now.Add(time.Second)
	m.step(slots("keep", 60, Slot{K: 0, Node: "x", ModifyIndex: 60}))
	m.step(SessionLost{})
	m.step(SessionCreated{ID: "s-2"})
	m.step(InstanceExited{Slot: c.Slot})
	// x's session invalidated in turn: the slot free, not released.
	m.now = m.now.Add(time.Second)
	since := m.now
	acts := m.step(slots("keep", 70, Slot{K: 0}))
	c2, at, ok := runUntil[Claim](m, acts, since.Add(25*time.Second))
	if !ok {
		t.Fatal("no claim after node_lost_after")
	}
	if at.Before(since.Add(20 * time.Second)) {
		t.Fatalf("claimed %s after x's loss (%+v), want node_lost_after (20s): x's loss, not this node's", at.Sub(since), c2)
	}
	if c2.From != "x" {
		t.Errorf("claim from %q, want x", c2.From)
	}
}

// holdKeep runs m from acts until it claims keep/0 (within d), answers the
// claim (fencing token 42), starts the instance and shows it the hold.
func holdKeep(t *testing.T, m *machine, acts []any, d time.Duration) Claim {
	t.Helper()
	c, _, ok := runUntil[Claim](m, acts, m.now.Add(d))
	if !ok {
		t.Fatal("no claim")
	}
	m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42})
	m.step(InstanceStarted{Slot: c.Slot})
	m.step(slots("keep", 42, Slot{K: 0, Node: "me", ModifyIndex: 42}))
	return c
}
