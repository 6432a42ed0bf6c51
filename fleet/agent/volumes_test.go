package agent

import (
	"strings"
	"testing"
	"time"
)

var dbVol = Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1, Volumes: true}

// claimed brings m to the answer of its claim of db/0 (term index 42) and
// returns the actions of that answer.
func claimed(t *testing.T, m *machine) []any {
	t.Helper()
	w, ok := find[Wake](m.step(slots("db", 5)))
	if !ok {
		t.Fatal("no wake for the claim")
	}
	m.now = w.At
	c, ok := find[Claim](m.step(Tick{}))
	if !ok {
		t.Fatal("no claim")
	}
	m.now = m.now.Add(2 * time.Millisecond)
	return m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42})
}

// A claimed slot with volumes restores first; its instance starts only
// once the restore of this term answered OK.
func TestVolumesRestoreBeforeStart(t *testing.T) {
	id := SlotID{"db", 0}
	for _, tc := range []struct {
		name    string
		answers []RestoreDone
		start   bool
	}{
		{"no answer yet", nil, false},
		{"an earlier term's answer", []RestoreDone{{Slot: id, Index: 7, OK: true}}, false},
		{"another slot's answer", []RestoreDone{{Slot: SlotID{"db", 1}, Index: 42, OK: true}}, false},
		{"restored", []RestoreDone{{Slot: id, Index: 42, OK: true}}, true},
		{"failed", []RestoreDone{{Slot: id, Index: 42}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, dbVol)
			acts := claimed(t, m)
			if _, ok := find[Start](acts); ok {
				t.Fatalf("started with the claim's answer: %v", acts)
			}
			r, ok := find[Restore](acts)
			if !ok || r.Slot != id || r.Index != 42 || r.Session != "s-me" {
				t.Fatalf("restore: %+v %v", r, ok)
			}
			if p := m.a.Held()[id]; p != Restoring {
				t.Fatalf("phase %v, want restoring", p)
			}
			var started bool
			for _, in := range tc.answers {
				st, ok := find[Start](m.step(in))
				if ok && st.Index != 42 {
					t.Fatalf("start with token %d", st.Index)
				}
				started = started || ok
			}
			if started != tc.start {
				t.Fatalf("started %v, want %v", started, tc.start)
			}
		})
	}
}

// A unit without volumes starts with the claim's answer, as before.
func TestNoVolumesStartsAtOnce(t *testing.T) {
	u := dbVol
	u.Volumes = false
	m := newMachine(t, u)
	acts := claimed(t, m)
	if _, ok := find[Restore](acts); ok {
		t.Fatalf("restore without volumes: %v", acts)
	}
	if _, ok := find[Start](acts); !ok {
		t.Fatalf("no start: %v", acts)
	}
}

// Given up gracefully, a slot with volumes publishes its handoff once its
// instance has exited and is released only once the handoff answered
// (OK or not: a failed one leaves the next holder to on_missing).
func TestVolumesHandoffBeforeRelease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		volume bool
		answer HandoffDone
	}{
		{"handed off", true, HandoffDone{OK: true}},
		{"handoff refused", true, HandoffDone{GiveUp: true}},
		{"no volumes", false, HandoffDone{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := SlotID{"db", 1}
			m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Warm: &Warm{Session: "s-me", At: t0,
				Held: map[SlotID]uint64{id: 9}}})}
			acts := m.step(UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, MaxPerNode: 2, Volumes: tc.volume}}})
			if _, ok := find[Stop](acts); !ok {
				t.Fatalf("no stop: %v", acts)
			}
			if _, ok := find[PushHandoff](acts); ok {
				t.Fatal("handed off before the instance exited")
			}
			acts = m.step(InstanceExited{Slot: id})
			if !tc.volume {
				if _, ok := find[Release](acts); !ok {
					t.Fatalf("no release: %v", acts)
				}
				return
			}
			if _, ok := find[Release](acts); ok {
				t.Fatal("released before the handoff")
			}
			p, ok := find[PushHandoff](acts)
			if !ok || p.Slot != id || p.Index != 9 || !p.Ready || p.Session != "s-me" {
				t.Fatalf("handoff: %+v %v", p, ok)
			}
			if ph := m.a.Held()[id]; ph != HandingOff {
				t.Fatalf("phase %v", ph)
			}
			tc.answer.Slot = id
			if r, ok := find[Release](m.step(tc.answer)); !ok || r.Session != "s-me" {
				t.Fatalf("no release after the handoff: %+v %v", r, ok)
			}
		})
	}
}

// A restore that failed: no start; the handoff it was to restore is
// passed on (Ready false), the slot released, and not claimed again here
// before RestoreBackoff.
func TestVolumesRestoreFailed(t *testing.T) {
	m := newMachine(t, dbVol)
	claimed(t, m)
	id := SlotID{"db", 0}
	acts := m.step(RestoreDone{Slot: id, Index: 42, Note: "source unreachable"})
	if _, ok := find[Start](acts); ok {
		t.Fatal("started after a failed restore")
	}
	p, ok := find[PushHandoff](acts)
	if !ok || p.Ready {
		t.Fatalf("handoff: %+v %v, want one passed on", p, ok)
	}
	if _, ok := find[Release](m.step(HandoffDone{Slot: id, OK: true})); !ok {
		t.Fatal("no release")
	}
	failedAt := m.now
	wake, _ := find[Wake](m.step(ReleaseDone{Slot: id, OK: true}))
	m.now = m.now.Add(2 * time.Second)
	acts = m.step(slots("db", 9, Slot{K: 0, Released: true}))
	if _, ok := find[Claim](acts); ok {
		t.Fatal("claimed again before the backoff")
	}
	for range 20 {
		if w, ok := find[Wake](acts); ok {
			wake = w
		}
		if !wake.At.After(m.now) {
			t.Fatal("no wake for the claim after the backoff")
		}
		m.now = wake.At
		acts = m.step(Tick{})
		if c, ok := find[Claim](acts); ok {
			if m.now.Before(failedAt.Add(RestoreBackoff)) {
				t.Fatalf("claimed at %v, before the backoff", m.now.Sub(failedAt))
			}
			if c.Slot != id {
				t.Fatalf("claim %+v", c)
			}
			return
		}
	}
	t.Fatal("never claimed again")
}

// Scaled down while restoring: no instance to stop, its handoff passes on
// what it was to restore; lost while restoring: dropped, and a late
// answer starts nothing.
func TestVolumesGivenUpWhileRestoring(t *testing.T) {
	id := SlotID{"db", 0}
	t.Run("scaled down", func(t *testing.T) {
		m := newMachine(t, dbVol)
		claimed(t, m)
		u := dbVol
		u.Count = 0
		acts := m.step(UnitsAnswer{Units: []Unit{u}})
		if _, ok := find[Stop](acts); ok {
			t.Fatalf("a stop with no instance: %v", acts)
		}
		if p, ok := find[PushHandoff](acts); !ok || p.Ready {
			t.Fatalf("handoff: %+v %v", p, ok)
		}
		if _, ok := find[Start](m.step(RestoreDone{Slot: id, Index: 42, OK: true})); ok {
			t.Fatal("started after the scale-down")
		}
	})
	t.Run("session lost", func(t *testing.T) {
		m := newMachine(t, dbVol)
		claimed(t, m)
		acts := m.step(SessionLost{})
		if _, ok := find[Stop](acts); ok {
			t.Fatalf("a stop with no instance: %v", acts)
		}
		if _, held := m.a.Held()[id]; held {
			t.Fatal("still held")
		}
		if _, ok := find[Start](m.step(RestoreDone{Slot: id, Index: 42, OK: true})); ok {
			t.Fatal("started after the session was lost")
		}
	})
}

// A handoff with no answer (no leader, cut off) is sent again, and the
// release waits for it: released without, the data would be lost though
// its holder is up.
func TestVolumesHandoffRetried(t *testing.T) {
	id := SlotID{"db", 0}
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Warm: &Warm{Session: "s-me", At: t0,
		Held: map[SlotID]uint64{id: 9}}})}
	m.step(UnitsAnswer{Units: []Unit{{Name: "db", Count: 0, MaxPerNode: 1, Volumes: true}}})
	if _, ok := find[PushHandoff](m.step(InstanceExited{Slot: id})); !ok {
		t.Fatal("no handoff")
	}
	acts := m.step(HandoffDone{Slot: id, Note: "no answer"})
	if _, ok := find[Release](acts); ok {
		t.Fatal("released without its handoff")
	}
	w, ok := find[Wake](acts)
	if !ok || w.At.Sub(m.now) != HandoffRetry {
		t.Fatalf("wake %+v %v, want in %v", w, ok, HandoffRetry)
	}
	m.now = w.At.Add(-time.Millisecond)
	if _, ok := find[PushHandoff](m.step(Tick{})); ok {
		t.Fatal("sent again too soon")
	}
	m.now = w.At
	p, ok := find[PushHandoff](m.step(Tick{}))
	if !ok || p.Index != 9 || !p.Ready {
		t.Fatalf("handoff again: %+v %v", p, ok)
	}
	if _, ok := find[Release](m.step(HandoffDone{Slot: id, OK: true})); !ok {
		t.Fatal("no release after the handoff")
	}
}

// An exclusive hold handing off is not among the slots a confirmation
// reads: the confirmation's answer does not end it (it did: the handoff
// was dropped, and the slot stayed held by a node that had forgotten it).
func TestVolumesConfirmationSparesHandoff(t *testing.T) {
	id := SlotID{"db", 0}
	m := &machine{t: t, now: t0, a: New(Config{Node: "me", Seed: 1, Warm: &Warm{Session: "s-me", At: t0,
		Held: map[SlotID]uint64{id: 9}, Exclusive: map[string]bool{"db": true}}})}
	m.step(UnitsAnswer{Units: []Unit{{Name: "db", Count: 0, Exclusive: true, MaxPerNode: 1, Volumes: true}}})
	m.now = m.now.Add(10 * time.Millisecond)
	m.step(InstanceExited{Slot: id})
	m.now = m.now.Add(10 * time.Millisecond)
	m.step(ConfirmDone{Sent: m.now, Held: map[SlotID]bool{}})
	if p, ok := m.a.Held()[id]; !ok || p != HandingOff {
		t.Fatalf("phase %v held %v, want handing-off", p, ok)
	}
	if _, ok := find[Release](m.step(HandoffDone{Slot: id, OK: true})); !ok {
		t.Fatal("no release")
	}
}

// A restoring hold the watchdog ends is looked at again at once: Consul
// may still show it held by this session, a stray to release (it was not:
// the slot stayed held, by nobody's instance, until the unit's next view).
func TestVolumesLostWhileRestoringReleasesStray(t *testing.T) {
	m := newMachine(t, dbVol)
	claimed(t, m)
	id := SlotID{"db", 0}
	m.step(slots("db", 6, Slot{K: 0, Node: "me", ModifyIndex: 42}))
	m.now = m.now.Add(2 * time.Second) // no confirmation: past the watchdog's deadline
	acts := m.step(Tick{})
	if p := m.a.Held()[id]; p != Releasing {
		t.Fatalf("phase %v after the watchdog, want releasing (the stray)", p)
	}
	if r, ok := find[Release](acts); !ok || r.Slot != id {
		t.Fatalf("no stray release: %v", acts)
	}
}

// A node stopping (told there are no units) or a unit removed: the hold
// hands off still, as its unit was when claimed (it did not: a graceful
// stop of the executor released without a handoff, found on real Consul).
func TestVolumesHandoffWhenUnitGone(t *testing.T) {
	m := newMachine(t, dbVol)
	claimed(t, m)
	id := SlotID{"db", 0}
	m.step(RestoreDone{Slot: id, Index: 42, OK: true})
	m.step(InstanceStarted{Slot: id})
	if _, ok := find[Stop](m.step(UnitsAnswer{})); !ok {
		t.Fatal("no stop")
	}
	acts := m.step(InstanceExited{Slot: id})
	if _, ok := find[Release](acts); ok {
		t.Fatal("released without a handoff")
	}
	if p, ok := find[PushHandoff](acts); !ok || !p.Ready || p.Index != 42 {
		t.Fatalf("handoff %+v %v", p, ok)
	}
}

// The periodic copies (Unit.CopyEvery, reconcileCopies):
// a running hold pushes one CopyEvery after its instance started, one at
// a time, the next CopyEvery after the answer (OK or not); none before
// the instance runs, none while stopping, none for a unit without.
func TestVolumesPeriodicCopies(t *testing.T) {
	id := SlotID{"db", 0}
	every := 2 * time.Second
	u := dbVol
	u.CopyEvery = every
	u.Exclusive = false // (no watchdog to feed confirmations to)
	m := newMachine(t, u)
	claimed(t, m)
	acts := m.step(RestoreDone{Slot: id, Index: 42, OK: true, Note: "restored"})
	if st, ok := find[Start](acts); !ok || st.Volumes != "restored" {
		t.Fatalf("start with the restore's note: %+v %v", st, ok)
	}
	m.now = m.now.Add(5 * every) // not running yet: nothing due
	if p, ok := find[PushCopies](m.step(Tick{})); ok {
		t.Fatalf("a copy before the instance runs: %+v", p)
	}
	started := m.now
	acts = m.step(InstanceStarted{Slot: id})
	if _, ok := find[PushCopies](acts); ok {
		t.Fatal("a copy at the start")
	}
	if w, ok := find[Wake](acts); !ok || !w.At.Equal(started.Add(every)) {
		t.Fatalf("wake %+v %v, want at the start + %s", w, ok, every)
	}
	m.now = started.Add(every - time.Millisecond)
	if _, ok := find[PushCopies](m.step(Tick{})); ok {
		t.Fatal("a copy before the interval")
	}
	m.now = started.Add(every)
	p, ok := find[PushCopies](m.step(Tick{}))
	if !ok || p.Slot != id || p.Index != 42 || p.Session != "s-me" {
		t.Fatalf("copy: %+v %v", p, ok)
	}
	m.now = m.now.Add(3 * every) // the answer is slow: no second at once
	if _, ok := find[PushCopies](m.step(Tick{})); ok {
		t.Fatal("a second copy while the first is on its way")
	}
	if _, ok := find[PushCopies](m.step(CopiesDone{Slot: id, Index: 7, OK: true})); ok {
		t.Fatal("an earlier term's answer moved the copies")
	}
	answered := m.now
	acts = m.step(CopiesDone{Slot: id, Index: 42, Note: "no peer took the copy"})
	if _, ok := find[PushCopies](acts); ok {
		t.Fatal("a copy at once after a failed one")
	}
	m.now = answered.Add(every)
	if _, ok := find[PushCopies](m.step(Tick{})); !ok {
		t.Fatal("no copy an interval after the last answer")
	}
	m.step(CopiesDone{Slot: id, Index: 42, OK: true})
	// Scaled down: it stops, hands off, and pushes no copy meanwhile.
	u.Count = 0
	m.step(UnitsAnswer{Units: []Unit{u}})
	m.now = m.now.Add(3 * every)
	if p, ok := find[PushCopies](m.step(Tick{})); ok {
		t.Fatalf("a copy while stopping: %+v", p)
	}

	// Without CopyEvery: never.
	m = newMachine(t, dbVol)
	claimed(t, m)
	m.step(RestoreDone{Slot: id, Index: 42, OK: true})
	m.step(InstanceStarted{Slot: id})
	m.now = m.now.Add(time.Hour)
	if p, ok := find[PushCopies](m.step(Tick{})); ok {
		t.Fatalf("a copy without replicas: %+v", p)
	}
}

// A claim's restore names the slot's previous holder as this node saw it
// in the unit's index (Restore.Prev: cluster.ChooseData's PrevNode and
// the restore record's From), for a unit whose
// volumes keep data (Sticky); "" when it never saw one.
func TestVolumesRestoreNamesPrevious(t *testing.T) {
	for _, tc := range []struct {
		name string
		seen bool
		want string
	}{
		{"held by another before", true, "other"},
		{"never seen held", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := dbVol
			u.Sticky = true
			m := newMachine(t, u)
			if tc.seen {
				m.step(slots("db", 4, Slot{K: 0, Node: "other", ModifyIndex: 4}))
			}
			w, ok := find[Wake](m.step(slots("db", 5, Slot{K: 0, Released: true})))
			if !ok {
				t.Fatal("no wake for the claim")
			}
			m.now = w.At
			c, ok := find[Claim](m.step(Tick{}))
			if !ok {
				t.Fatal("no claim")
			}
			r, ok := find[Restore](m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42}))
			if !ok || r.Prev != tc.want {
				t.Fatalf("restore %+v %v, want Prev %q", r, ok, tc.want)
			}
		})
	}
}

// on_missing = "fail" (RestoreDone.Missing): the slot fails as an instance
// that failed for good does (reset.go): its handoff passed on first, then
// released with its failed mark and the "fail" record, no back-off; any
// other failed restore is released plainly, with the back-off.
func TestVolumesMissingFailsTheSlot(t *testing.T) {
	id := SlotID{"db", 0}
	for _, tc := range []struct {
		name    string
		done    RestoreDone
		failed  bool
		backoff bool
	}{
		{"on_missing fail", RestoreDone{Slot: id, Index: 42, Missing: true,
			Note: `volume data missing: volume data: the last holder (n2) gave no handoff, and on_missing is "fail"`}, true, false},
		{"source unreachable", RestoreDone{Slot: id, Index: 42, Note: "source unreachable"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, dbVol)
			claimed(t, m)
			acts := m.step(tc.done)
			if _, ok := find[Start](acts); ok {
				t.Fatal("started after a failed restore")
			}
			if p, ok := find[PushHandoff](acts); !ok || p.Ready {
				t.Fatalf("handoff: %+v %v, want one passed on", p, ok)
			}
			acts = m.step(HandoffDone{Slot: id, OK: true})
			r, ok := find[Release](acts)
			if !ok {
				t.Fatalf("no release: %v", acts)
			}
			if (r.Failed != nil) != tc.failed {
				t.Fatalf("release failed mark %+v, want failed %v", r.Failed, tc.failed)
			}
			if tc.failed {
				if r.Failed.Node != "me" || r.Failed.Reason != tc.done.Note {
					t.Errorf("failed mark %+v", r.Failed)
				}
				if rec := records(acts, "fail"); len(rec) != 1 || !strings.Contains(rec[0].Reason, "mariposa reset db/0") {
					t.Errorf("fail records %v", rec)
				}
			}
			_, backoff := m.a.volBackoff[id]
			if backoff != tc.backoff {
				t.Errorf("back-off %v, want %v", backoff, tc.backoff)
			}
		})
	}
}
