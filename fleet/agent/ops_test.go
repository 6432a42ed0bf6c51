package agent

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// opsMachine is a machine whose executor watches control/ (Config.Control).
func opsMachine(t *testing.T, f Faults, warm *Warm, nodes []string, units ...Unit) *machine {
	m := &machine{t: t, a: New(Config{Node: "me", Seed: 1, Control: true, Faults: f, Warm: warm}), now: t0}
	m.step(UnitsAnswer{Units: units})
	if warm == nil {
		m.step(SessionCreated{ID: "s-me"})
	}
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: nodes}})
	return m
}

func ctlView(idx uint64, c cluster.Control) ControlAnswer {
	return ControlAnswer{View: &ControlView{Index: idx, Control: c}}
}

func pause(unit, scope string) cluster.Control {
	return cluster.Control{Pauses: map[string]cluster.PauseRecord{unit: {Scope: scope, Unit: unit, Reason: "test", Actor: "op", At: t0}}}
}

// takeoverWords: a takeover's claim record's reason (website/operations.md:
// its rank, "takeover from a lost node").
var takeoverWords = regexp.MustCompile(`^rank [0-9]+; takeover from a lost node$`)

func records(acts []any, action string) []Record {
	var out []Record
	for _, a := range acts {
		if r, ok := a.(Record); ok && r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// Each control's decision on a claim of a free slot: whether it is made,
// whether it spends the budget, and the record of a claim held back.
func TestControlsGateClaims(t *testing.T) {
	web := Unit{Name: "web", Count: 1, MaxPerNode: 1}
	lostLog := cluster.TakeoverLog{Takeovers: []cluster.Takeover{{Slot: "x/0", Node: "n2", From: "n8", At: t0.Add(-time.Second)}}}
	for _, tc := range []struct {
		name   string
		faults Faults
		noCtl  bool
		ctl    cluster.Control
		lost   string // the slot was held by this node and freed by an invalidation; "" released
		claim  bool
		budget bool // the claim spends the budget
		hold   string
	}{
		{name: "released slot", claim: true},
		{name: "no answer of control/ yet", noCtl: true},
		{name: "fleet paused for placement", ctl: pause("", cluster.PausePlacement), hold: "claims paused"},
		{name: "unit paused, scope all", ctl: pause("web", cluster.PauseAll), hold: "claims paused"},
		{name: "another unit paused", ctl: pause("db", cluster.PauseAll), claim: true},
		{name: "deploys paused only", ctl: pause("", cluster.PauseDeploy), claim: true},
		{name: "pause ignored (mutation)", faults: Faults{IgnorePause: true}, ctl: pause("", cluster.PauseAll), claim: true},
		{name: "this node draining", ctl: cluster.Control{Drains: map[string]cluster.DrainRecord{"me": {Node: "me", Deadline: t0.Add(time.Hour)}}}},
		{name: "another node draining", ctl: cluster.Control{Drains: map[string]cluster.DrainRecord{"n2": {Node: "n2", Deadline: t0.Add(time.Hour)}}}, claim: true},
		{name: "brake: released slot still placed", ctl: cluster.Control{Storm: &cluster.StormRecord{At: t0}}, claim: true},
		{name: "brake: no takeover", ctl: cluster.Control{Storm: &cluster.StormRecord{At: t0}}, lost: "n9", hold: "storm brake"},
		{name: "brake: own lost slot taken back", ctl: cluster.Control{Storm: &cluster.StormRecord{At: t0}}, lost: "me", claim: true},
		{name: "brake ignored (mutation)", faults: Faults{IgnoreBrake: true}, ctl: cluster.Control{Storm: &cluster.StormRecord{At: t0}}, lost: "n9", claim: true, budget: true},
		{name: "takeover within the budget", lost: "n9", claim: true, budget: true},
		{name: "budget spent by another lost node", ctl: cluster.Control{Takeovers: lostLog, TakeoversIndex: 33}, lost: "n9", hold: "budget is spent"},
		{name: "budget already spent on the same lost node", ctl: cluster.Control{Takeovers: lostLog, TakeoversIndex: 33}, lost: "n8", claim: true, budget: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := opsMachine(t, tc.faults, nil, []string{"me", "n2", "n3"}, web)
			var acts []any
			if !tc.noCtl {
				acts = append(acts, m.step(ctlView(20, tc.ctl))...)
			}
			if tc.lost != "" {
				acts = append(acts, m.step(slots("web", 5, Slot{K: 0, Node: tc.lost, ModifyIndex: 5}))...)
				if tc.lost == "me" {
					// An earlier session's hold: a stray, whose release
					// is refused (that session is gone).
					acts = append(acts, m.step(ReleaseDone{Slot: SlotID{"web", 0}})...)
				}
				acts = append(acts, m.step(slots("web", 6))...)
			} else {
				acts = append(acts, m.step(slots("web", 6, Slot{K: 0, Released: true}))...)
			}
			m.now = m.now.Add(5 * time.Second)
			acts = append(acts, m.step(Tick{})...)
			c, claimed := find[Claim](acts)
			if claimed != tc.claim {
				t.Fatalf("claimed %v, want %v: %v", claimed, tc.claim, acts)
			}
			if claimed && (c.Takeover != nil) != tc.budget {
				t.Fatalf("takeover %+v, want one: %v", c.Takeover, tc.budget)
			}
			if c.Takeover != nil {
				if c.Takeover.Index != tc.ctl.TakeoversIndex || c.Takeover.Entry.From != tc.lost ||
					!slices.ContainsFunc(c.Takeover.Log.Takeovers, func(e cluster.Takeover) bool { return e == c.Takeover.Entry }) {
					t.Fatalf("budget CAS %+v", c.Takeover)
				}
				// Its record is the claim's, in website/operations.md's
				// words, riding in the claim.
				if r := records(acts, "claim"); len(r) != 1 || !takeoverWords.MatchString(r[0].Reason) || r[0].From != tc.lost ||
					len(records(acts, "takeover")) != 0 {
					t.Fatalf("takeover's claim record %+v, want one from %s: %v", r, tc.lost, acts)
				}
				if w, i := AuditPlace(acts, records(acts, "claim")[0]); w != Riding || acts[i].(Claim).Slot != c.Slot {
					t.Fatalf("takeover's record at %v %d, want riding in its claim", w, i)
				}
			}
			holds := records(acts, "hold")
			switch {
			case tc.hold == "" && len(holds) > 0:
				t.Fatalf("held back: %v", holds)
			case tc.hold != "" && (len(holds) != 1 || !strings.Contains(holds[0].Reason, tc.hold)):
				t.Fatalf("hold records %v, want one saying %q", holds, tc.hold)
			}
			// Held back: recorded once, not at every look.
			m.now = m.now.Add(time.Second)
			if again := records(m.step(slots("web", 7)), "hold"); len(again) > 0 {
				t.Fatalf("held back recorded again: %v", again)
			}
		})
	}
}

// A claim held back by a pause is made once the pause is lifted, after
// its rank's delay counted from the resume (the ranks stay apart).
func TestResumeRestartsTheVacancy(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	m.step(ctlView(20, pause("", cluster.PausePlacement)))
	m.step(slots("web", 6, Slot{K: 0, Released: true}))
	m.now = m.now.Add(10 * time.Second)
	if _, ok := find[Claim](m.step(Tick{})); ok {
		t.Fatal("claimed while paused")
	}
	acts := m.step(ctlView(21, cluster.Control{}))
	c, claimed := find[Claim](acts)
	w, woke := find[Wake](acts)
	// Rank 0 claims at its jitter (under a step/4) from the resume; a
	// rank 1 would wait a step more.
	if !claimed && (!woke || w.At.Sub(m.now) > placement.DefaultStep/4) {
		t.Fatalf("after the resume: %v", acts)
	}
	if !claimed {
		m.now = w.At
		c, claimed = find[Claim](m.step(Tick{}))
	}
	if !claimed || c.Slot != (SlotID{"web", 0}) {
		t.Fatalf("no claim after the resume")
	}
}

// takeoverOfN9: a machine whose slot web/0 was held by n9, lost, and the
// takeover it claims (the budget's CAS from no log, at index 20).
func takeoverOfN9(t *testing.T) (*machine, Claim) {
	t.Helper()
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2", "n3"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	m.step(ctlView(20, cluster.Control{}))
	m.step(slots("web", 5, Slot{K: 0, Node: "n9", ModifyIndex: 5}))
	m.step(slots("web", 6))
	m.now = m.now.Add(5 * time.Second)
	c, ok := find[Claim](m.step(Tick{}))
	if !ok || c.Takeover == nil {
		t.Fatal("no takeover")
	}
	return m, c
}

// A takeover whose budget CAS was refused waits for a newer answer of
// control/, then tries again with it.
func TestBudgetRefusedWaitsForNewerLog(t *testing.T) {
	m, c := takeoverOfN9(t)
	m.step(ClaimDone{Slot: c.Slot, Budget: true})
	m.now = m.now.Add(5 * time.Second)
	if _, ok := find[Claim](append(m.step(Tick{}), m.step(slots("web", 7))...)); ok {
		t.Fatal("claimed again on the log whose CAS was refused")
	}
	// Another node took over a slot of n9: the same lost node, free.
	log := cluster.TakeoverLog{Takeovers: []cluster.Takeover{{Slot: "x/0", Node: "n2", From: "n9", At: m.now.Add(-2 * FreshTakeover)}}}
	acts := m.step(ctlView(30, cluster.Control{Takeovers: log, TakeoversIndex: 30}))
	if w, ok := find[Wake](acts); ok {
		m.now = w.At
		acts = append(acts, m.step(Tick{})...)
	}
	c, ok := find[Claim](acts)
	if !ok || c.Takeover == nil || !c.Takeover.Logged || c.Takeover.Index != 30 || len(c.Takeover.Log.Takeovers) != 2 {
		t.Fatalf("claim on the newer log: %+v %v", c, acts)
	}
}

// The brake: written once when more than half of the supervisors vanish,
// obeyed from its own write, lifted by an answer at or after it, which
// forgets the vanishings.
func TestStormBrake(t *testing.T) {
	all := []string{"me", "n2", "n3", "n4", "n5", "n6"}
	for _, tc := range []struct {
		name    string
		failing []string
		brake   bool
	}{
		{"two of six: a node loss", []string{"n2", "n3"}, false},
		{"three of six: not more than half", []string{"n2", "n3", "n4"}, false},
		{"four of six: a storm", []string{"n2", "n3", "n4", "n5"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := opsMachine(t, Faults{}, nil, all, Unit{Name: "web", Count: 1, MaxPerNode: 1})
			m.step(ctlView(20, cluster.Control{}))
			var live []string
			for _, n := range all {
				if !slices.Contains(tc.failing, n) {
					live = append(live, n)
				}
			}
			m.now = m.now.Add(time.Second)
			acts := m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: live, Failing: tc.failing}})
			w, ok := find[WriteBrake](acts)
			if ok != tc.brake {
				t.Fatalf("brake written %v, want %v: %v", ok, tc.brake, acts)
			}
			if !ok {
				return
			}
			if w.Record.Base != 6 || !slices.Equal(w.Record.Vanished, tc.failing) || len(records(acts, "storm-brake")) != 1 {
				t.Fatalf("brake %+v %v", w.Record, acts)
			}
			// Not again while it is on its way, nor after a refusal.
			if _, again := find[WriteBrake](m.step(Tick{})); again {
				t.Fatal("brake written twice")
			}
			m.step(BrakeDone{OK: true, Index: 50})
			// Obeyed from the write: no takeover of a lost slot.
			m.step(slots("web", 5, Slot{K: 0, Node: "n2", ModifyIndex: 5}))
			m.step(slots("web", 6))
			m.now = m.now.Add(5 * time.Second)
			if _, ok := find[Claim](m.step(Tick{})); ok {
				t.Fatal("takeover under the brake")
			}
			// An answer older than the write does not lift it.
			if _, ok := find[Claim](m.step(ctlView(40, cluster.Control{}))); ok {
				t.Fatal("an older answer lifted the brake")
			}
			m.step(ctlView(51, cluster.Control{Storm: &w.Record}))
			acts = m.step(ctlView(60, cluster.Control{}))
			if w, ok := find[Wake](acts); ok {
				m.now = w.At
				acts = append(acts, m.step(Tick{})...)
			}
			if _, ok := find[Claim](acts); !ok {
				t.Fatalf("no takeover after the resume: %v", acts)
			}
			// The vanishings are forgotten: the same failing nodes are no
			// new storm.
			if _, ok := find[WriteBrake](m.step(NodesAnswer{View: &NodesView{Index: 3, Nodes: live, Failing: tc.failing}})); ok {
				t.Fatal("brake engaged again by the vanishings it was lifted for")
			}
		})
	}
}

// A resume this node never saw the brake of (cut off while it was
// engaged) forgets its vanishings all the same: the lifted record's
// index moves, and the nodes it names down are no new vanishings when
// this node sees them down only now, whichever answer comes first. A
// storm of other nodes still engages the brake, its write checking the
// lifted record it saw.
func TestBrakeNotEngagedAgainAfterAMissedResume(t *testing.T) {
	all := []string{"me", "n2", "n3", "n4", "n5", "n6"}
	failing := []string{"n2", "n3", "n4", "n5"}
	lifted := func(idx uint64, down ...string) cluster.Control {
		return cluster.Control{LiftedIndex: idx, Lifted: &cluster.StormLifted{At: t0, By: "op", Down: down}}
	}
	web := Unit{Name: "web", Count: 1, MaxPerNode: 1}
	t.Run("the resume's answer first", func(t *testing.T) {
		m := opsMachine(t, Faults{}, nil, all, web)
		m.step(ctlView(20, cluster.Control{}))
		m.now = m.now.Add(10 * time.Second)
		m.step(ctlView(60, lifted(55, failing...)))
		acts := m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me", "n6"}, Failing: failing}})
		if w, ok := find[WriteBrake](acts); ok {
			t.Fatalf("brake engaged again for the nodes the resume lifted it for: %+v", w)
		}
	})
	t.Run("the nodes' answer first", func(t *testing.T) {
		m := opsMachine(t, Faults{}, nil, all, web)
		m.step(ctlView(20, cluster.Control{}))
		m.now = m.now.Add(10 * time.Second)
		w, ok := find[WriteBrake](m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me", "n6"}, Failing: failing}}))
		if !ok || w.Lifted != 0 {
			t.Fatalf("brake %+v %v: want one checking no lifted record", w, ok)
		}
		m.step(BrakeDone{}) // refused: the lifted record is there
		m.step(ctlView(60, lifted(55, failing...)))
		m.now = m.now.Add(time.Second)
		acts := m.step(NodesAnswer{View: &NodesView{Index: 3, Nodes: []string{"me", "n6"}, Failing: failing}})
		if _, ok := find[WriteBrake](append(acts, m.step(Tick{})...)); ok {
			t.Fatal("brake engaged again after the resume's answer")
		}
	})
	t.Run("a new storm", func(t *testing.T) {
		m := opsMachine(t, Faults{}, nil, all, web)
		m.step(ctlView(20, cluster.Control{}))
		m.step(ctlView(60, lifted(55, "n2")))
		m.now = m.now.Add(10 * time.Second)
		w, ok := find[WriteBrake](m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me", "n2"}, Failing: []string{"n3", "n4", "n5", "n6"}}}))
		if !ok || w.Lifted != 55 {
			t.Fatalf("brake %+v %v: want one checking the lifted record at 55", w, ok)
		}
	})
}

// A brake write that fails is tried again a second later, not in a loop.
func TestBrakeWriteRetried(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2", "n3", "n4"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	m.step(ctlView(20, cluster.Control{}))
	if _, ok := find[WriteBrake](m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me"}, Failing: []string{"n2", "n3", "n4"}}})); !ok {
		t.Fatal("no brake")
	}
	acts := m.step(BrakeDone{Err: errors.New("no leader")})
	if _, ok := find[WriteBrake](acts); ok {
		t.Fatal("retried at once")
	}
	m.now = m.now.Add(time.Second)
	if _, ok := find[WriteBrake](m.step(Tick{})); !ok {
		t.Fatal("not retried a second later")
	}
	if _, ok := find[WriteBrake](m.step(BrakeDone{})); ok {
		t.Fatal("written again after another node engaged it")
	}
}

// drainMachine: this node holds db/0 (exclusive) and web/0 and web/1
// (web allows two a node), and n2, n3 run mariposa too.
func drainMachine(t *testing.T, f Faults, nodes ...string) *machine {
	warm := &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{"db", 0}: 10, {"web", 0}: 11, {"web", 1}: 12},
		Exclusive: map[string]bool{"db": true}}
	m := opsMachine(t, f, warm, append([]string{"me"}, nodes...),
		Unit{Name: "db", Count: 1, Exclusive: true, MaxPerNode: 1}, Unit{Name: "web", Count: 2, MaxPerNode: 2})
	m.step(slots("db", 10, Slot{K: 0, Node: "me", ModifyIndex: 10}))
	m.step(slots("web", 12, Slot{K: 0, Node: "me", ModifyIndex: 11}, Slot{K: 1, Node: "me", ModifyIndex: 12}))
	m.step(ctlView(20, cluster.Control{}))
	return m
}

func releasesOf(acts []any, unit string) []Release {
	var out []Release
	for _, a := range acts {
		if r, ok := a.(Release); ok && r.Slot.Unit == unit {
			out = append(out, r)
		}
	}
	return out
}

func drain(deadline time.Duration, force bool) cluster.Control {
	return cluster.Control{Drains: map[string]cluster.DrainRecord{"me": {Node: "me", Deadline: t0.Add(deadline), Force: force}}}
}

// The drain gives one slot at a time: the exclusive one stopped, then
// released; the next only once another node holds it; a non-exclusive one
// released with its instance running, which stops once another node holds
// the slot. Its status says done only when nothing is held.
func TestDrainOneAtATime(t *testing.T) {
	m := drainMachine(t, Faults{}, "n2", "n3")
	var status []DrainStatus
	step := func(in any) []any {
		t.Helper()
		acts := m.step(in)
		for _, a := range acts {
			if p, ok := a.(PublishDrain); ok {
				status = append(status, p.Status)
				if p.Status.Done && len(m.a.Held()) > 0 {
					t.Fatalf("done while holding %v", m.a.Held())
				}
				if len(records(acts, "drain-status")) != 1 {
					t.Fatalf("status without its record: %v", acts)
				}
				m.a.Step(m.now, DrainPublished{Status: p.Status, OK: true})
			}
		}
		return acts
	}
	acts := step(ctlView(21, drain(time.Hour, false)))
	s, ok := find[Stop](acts)
	// website/operations.md's vocabulary: a drained slot's record is a
	// "release" saying "drained from".
	if !ok || s.Slot != (SlotID{"db", 0}) || s.Kill || len(records(acts, "release")) != 1 ||
		!strings.HasPrefix(records(acts, "release")[0].Reason, "drained from me") || len(records(acts, "drain")) != 0 {
		t.Fatalf("first: %v", acts)
	}
	if _, ok := find[Release](acts); ok {
		t.Fatalf("two slots at once: %v", acts)
	}
	r, ok := find[Release](step(InstanceExited{Slot: s.Slot}))
	if !ok || r.Slot != s.Slot || r.Audit.Action != "release" {
		t.Fatalf("the exclusive slot not released after its stop with its record: %+v", r)
	}
	if web := releasesOf(step(ReleaseDone{Slot: s.Slot, OK: true}), "web"); len(web) > 0 {
		t.Fatal("the next slot before db/0 is held elsewhere")
	}
	// db/0 held by n2: the next slot waits until its instance passes
	// there (drain.md: "the next slot moves once the new holder's
	// instance passes").
	acts = step(slots("db", 30, Slot{K: 0, Node: "n2", ModifyIndex: 30}))
	if aw, ok := find[AwaitSuccessor](acts); !ok || aw.Slot != s.Slot || !slices.Equal(aw.Services, []string{"db"}) || len(releasesOf(acts, "web")) > 0 {
		t.Fatalf("db/0 held by n2: want AwaitSuccessor for it and nothing more: %v", acts)
	}
	if _, ok := find[AwaitSuccessor](step(Tick{})); ok {
		t.Fatal("AwaitSuccessor asked twice")
	}
	acts = step(SuccessorPassing{Slot: s.Slot})
	rs := releasesOf(acts, "web")
	if len(rs) != 1 || rs[0].Slot != (SlotID{"web", 0}) {
		t.Fatalf("web/0 not given once db/0 moved: %v", acts)
	}
	if _, ok := find[Stop](acts); ok {
		t.Fatalf("a non-exclusive slot's instance stopped before its successor: %v", acts)
	}
	r = rs[0]
	// The stale view of db showed the key still held here: a stray, whose
	// release is refused (the key is n2's now).
	step(ReleaseDone{Slot: s.Slot})
	if len(releasesOf(step(ReleaseDone{Slot: r.Slot, OK: true}), "web")) > 0 {
		t.Fatal("web/1 before web/0 is held elsewhere")
	}
	// web/0 held by n3: its old instance runs on until the new one
	// passes; then it stops, and web/1 goes.
	acts = step(slots("web", 31, Slot{K: 0, Node: "n3", ModifyIndex: 31}, Slot{K: 1, Node: "me", ModifyIndex: 12}))
	if _, ok := find[Stop](acts); ok {
		t.Fatalf("the orphan web/0 stopped before its successor passes: %v", acts)
	}
	if aw, ok := find[AwaitSuccessor](acts); !ok || aw.Slot != r.Slot {
		t.Fatalf("no AwaitSuccessor for web/0: %v", acts)
	}
	acts = step(SuccessorPassing{Slot: r.Slot})
	if s, ok := find[Stop](acts); !ok || s.Slot != r.Slot {
		t.Fatalf("the orphan web/0 not stopped: %v", acts)
	}
	r1, ok := find[Release](acts)
	if !ok || r1.Slot != (SlotID{"web", 1}) {
		t.Fatalf("web/1 not given: %v", acts)
	}
	step(InstanceExited{Slot: r.Slot})
	step(ReleaseDone{Slot: r1.Slot, OK: true})
	step(slots("web", 32, Slot{K: 0, Node: "n3", ModifyIndex: 31}, Slot{K: 1, Node: "n2", ModifyIndex: 32}))
	step(InstanceExited{Slot: r1.Slot})
	if len(status) == 0 || !status[len(status)-1].Done {
		t.Fatalf("not done at the end: %+v", status)
	}
	for _, st := range status[:len(status)-1] {
		if st.Done {
			t.Fatalf("done early: %+v", status)
		}
	}
}

// Which slots a drain gives, and when it is done, by the fleet it sees.
func TestDrainDecisions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nodes    []string
		deadline time.Duration
		force    bool
		faults   Faults
		given    int // slots given in the first step
		stuck    int
		done     bool
	}{
		{name: "one at a time", nodes: []string{"n2"}, deadline: time.Hour, given: 1},
		{name: "nowhere to go: stuck, kept running", deadline: time.Hour, stuck: 3},
		{name: "past the deadline: all at once", nodes: []string{"n2"}, deadline: -time.Second, given: 3},
		{name: "past the deadline, stuck: kept", deadline: -time.Second, stuck: 3},
		{name: "past the deadline, forced: given up", deadline: -time.Second, force: true, given: 3},
		{name: "done early (mutation)", nodes: []string{"n2"}, deadline: time.Hour, faults: Faults{DrainDoneEarly: true}, given: 1, done: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := drainMachine(t, tc.faults, tc.nodes...)
			acts := m.step(ctlView(21, drain(tc.deadline, tc.force)))
			given := 0
			for _, a := range acts {
				switch a.(type) {
				case Stop, Release:
					given++
				}
			}
			p, ok := find[PublishDrain](acts)
			if given != tc.given || !ok || len(p.Status.Stuck) != tc.stuck || p.Status.Done != tc.done || len(p.Status.Held) != 3 {
				t.Fatalf("given %d, status %+v; want given %d, %d stuck, done %v: %v", given, p.Status, tc.given, tc.stuck, tc.done, acts)
			}
		})
	}
}

// A drained slot that no other node may take (its constraint names this
// node, or the other is full) is stuck: kept running here, not given
// (cluster/drain.go; TestFleetDrainNowhere on a real fleet). Mutation check:
// movable without the feasibility check gives the slot (fails).
func TestDrainStuckByPlacement(t *testing.T) {
	onMe := &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "node.name", Value: "me"}}}
	for _, tc := range []struct {
		name  string
		unit  Unit
		info  map[string]placement.NodeInfo
		given int
	}{
		{name: "constraint names me", unit: Unit{Name: "web", Count: 1, MaxPerNode: 1, Placement: onMe}},
		{name: "n2 full", unit: Unit{Name: "web", Count: 1, MaxPerNode: 1, Resources: placement.Reservation{Memory: 512}},
			info: map[string]placement.NodeInfo{"n2": {Eligible: true, Capacity: &placement.Capacity{Total: placement.Reservation{CPU: 1000, Memory: 256}}}}},
		{name: "no placement: given", unit: Unit{Name: "web", Count: 1, MaxPerNode: 1}, given: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warm := &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{"web", 0}: 11}}
			m := opsMachine(t, Faults{}, warm, []string{"me", "n2"}, tc.unit)
			if tc.info != nil {
				m.step(NodesAnswer{View: &NodesView{Index: 2, Nodes: []string{"me", "n2"}, Info: tc.info}})
			}
			m.step(slots("web", 11, Slot{K: 0, Node: "me", ModifyIndex: 11}))
			m.step(ctlView(20, cluster.Control{}))
			acts := m.step(ctlView(21, drain(time.Hour, false)))
			given := len(releasesOf(acts, "web"))
			if _, ok := find[Stop](acts); ok {
				given++
			}
			p, ok := find[PublishDrain](acts)
			if given != tc.given || !ok || len(p.Status.Stuck) != 1-tc.given {
				t.Fatalf("given %d, status %+v; want given %d: %v", given, p.Status, tc.given, acts)
			}
		})
	}
}

// A claim whose answer was lost may hold the slot: a drain is not done
// until a newer index shows it does not.
func TestDrainCountsLostClaimAsHeld(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	m.step(ctlView(20, cluster.Control{}))
	w, _ := find[Wake](m.step(slots("web", 6, Slot{K: 0, Released: true})))
	m.now = w.At
	c, ok := find[Claim](m.step(Tick{}))
	if !ok {
		t.Fatal("no claim")
	}
	p, ok := find[PublishDrain](m.step(ctlView(21, cluster.Control{Drains: map[string]cluster.DrainRecord{"me": {Node: "me", Deadline: t0.Add(time.Hour)}}})))
	if !ok || p.Status.Done || !slices.Equal(p.Status.Held, []string{"web/0"}) {
		t.Fatalf("status %+v", p.Status)
	}
	m.step(DrainPublished{Status: p.Status, OK: true})
	if p, ok := find[PublishDrain](m.step(ClaimDone{Slot: c.Slot, Lost: true})); ok {
		t.Fatalf("status changed with the lost answer: %+v", p.Status)
	}
	p, ok = find[PublishDrain](m.step(slots("web", 7, Slot{K: 0, Released: true})))
	if !ok || !p.Status.Done {
		t.Fatalf("not done once a newer index shows the slot free: %+v", p.Status)
	}
}

// The draining node is left out of every node's ranking; the view ranked
// with changes with the drains, and only with them.
func TestDrainingNodesRankedOut(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2", "n3"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	if v := m.a.rankNodes(); v.Index != 1 || len(v.Nodes) != 3 {
		t.Fatalf("no control/ answer yet: %+v", v)
	}
	m.step(ctlView(20, cluster.Control{Drains: map[string]cluster.DrainRecord{"n2": {Node: "n2"}}}))
	v := m.a.rankNodes()
	if slices.Contains(v.Nodes, "n2") || len(v.Nodes) != 2 || v.Index == 1 {
		t.Fatalf("ranked with %+v", v)
	}
	m.step(ctlView(21, cluster.Control{Drains: map[string]cluster.DrainRecord{"n2": {Node: "n2"}}, TakeoversIndex: 21}))
	if m.a.rankNodes().Index != v.Index {
		t.Fatal("the ranked view changed with a control/ answer that did not change the drains")
	}
}

// A claim whose answer was lost and that was never applied moves no
// index: the draining node reads the key itself, a second apart, and is
// done once the read shows it not held.
func TestDrainChecksLostClaim(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	m.step(ctlView(20, cluster.Control{}))
	w, _ := find[Wake](m.step(slots("web", 6, Slot{K: 0, Released: true})))
	m.now = w.At
	c, _ := find[Claim](m.step(Tick{}))
	if p, ok := find[PublishDrain](m.step(ctlView(21, cluster.Control{Drains: map[string]cluster.DrainRecord{"me": {Node: "me", Deadline: t0.Add(time.Hour)}}}))); ok {
		m.step(DrainPublished{Status: p.Status, OK: true})
	}
	acts := m.step(ClaimDone{Slot: c.Slot, Lost: true})
	ch, ok := find[CheckHeld](acts)
	if p, ok := find[PublishDrain](acts); ok {
		m.step(DrainPublished{Status: p.Status, OK: true})
	}
	if !ok || !slices.Equal(ch.Slots, []SlotID{c.Slot}) || ch.Session != "s-me" {
		t.Fatalf("no read of the lost claim's key: %+v", ch)
	}
	// Held after all (applied, answer lost): still held, read again a
	// second later, not at once.
	if p, ok := find[PublishDrain](m.step(HeldChecked{Held: map[SlotID]bool{c.Slot: true}})); ok {
		if p.Status.Done {
			t.Fatal("done while the read shows the key held")
		}
		m.step(DrainPublished{Status: p.Status, OK: true})
	}
	if _, ok := find[CheckHeld](m.step(Tick{})); ok {
		t.Fatal("read again at once")
	}
	m.now = m.now.Add(time.Second)
	if _, ok := find[CheckHeld](m.step(Tick{})); !ok {
		t.Fatal("not read again a second later")
	}
	var done bool
	for _, a := range m.step(HeldChecked{Held: map[SlotID]bool{c.Slot: false}}) {
		if p, ok := a.(PublishDrain); ok {
			done = p.Status.Done
		}
	}
	if !done {
		t.Fatal("not done once the read shows the key free")
	}
}

// After a break in the watches (or the session lost), the old answer says
// nothing of who held a slot the next one shows lost: the takeover counts
// as a lost node of its own.
func TestTakeoverAfterBreakChargesUnknownHolder(t *testing.T) {
	for _, tc := range []struct {
		name string
		brk  any
		from string
	}{
		{"no break", nil, "n9"},
		{"watches resumed", WatchResumed{}, UnknownHolder + "web/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := opsMachine(t, Faults{}, nil, []string{"me", "n2", "n3"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
			m.step(ctlView(20, cluster.Control{}))
			m.step(slots("web", 5, Slot{K: 0, Node: "n9", ModifyIndex: 5}))
			if tc.brk != nil {
				m.step(tc.brk)
			}
			acts := m.step(slots("web", 6))
			m.now = m.now.Add(5 * time.Second)
			c, ok := find[Claim](append(acts, m.step(Tick{})...))
			if ok && c.Fresh && tc.brk != nil {
				// Not known held: first claimed as a slot never claimed,
				// which Consul refuses (its ClaimedKey exists).
				c, ok = find[Claim](m.step(ClaimDone{Slot: c.Slot, NotFresh: true}))
			}
			if !ok || c.Fresh || c.Takeover == nil || c.Takeover.Entry.From != tc.from {
				t.Fatalf("claim %+v, want a takeover from %q", c, tc.from)
			}
		})
	}
}

// A drained slot that nobody takes holds the drain up for handoffTimeout,
// then the next one goes.
func TestDrainHandoffTimeout(t *testing.T) {
	m := drainMachine(t, Faults{}, "n2", "n3")
	acts := m.step(ctlView(21, drain(time.Hour, false)))
	if p, ok := find[PublishDrain](acts); ok {
		m.step(DrainPublished{Status: p.Status, OK: true})
	}
	s, _ := find[Stop](acts)
	m.step(InstanceExited{Slot: s.Slot})
	m.step(ReleaseDone{Slot: s.Slot, OK: true})
	m.step(slots("db", 30, Slot{K: 0, Released: true})) // nobody took it
	m.now = t0.Add(handoffTimeout - time.Millisecond)
	if rs := releasesOf(m.step(Tick{}), "web"); len(rs) > 0 {
		t.Fatal("the next slot before the handoff's timeout")
	}
	m.now = t0.Add(handoffTimeout)
	if rs := releasesOf(m.step(Tick{}), "web"); len(rs) != 1 {
		t.Fatal("the next slot not given at the handoff's timeout")
	}
}

// A takeover held back for the budget is claimed when the budget frees up
// plus its rank's delay, not as soon as the window moves on (every node
// would claim at once).
func TestBudgetKeepsRanksApart(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2", "n3"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	oldest := t0.Add(-time.Second)
	log := cluster.TakeoverLog{Takeovers: []cluster.Takeover{{Slot: "x/0", Node: "n2", From: "n8", At: oldest}}}
	m.step(ctlView(20, cluster.Control{Takeovers: log, TakeoversIndex: 20}))
	m.step(slots("web", 5, Slot{K: 0, Node: "n9", ModifyIndex: 5}))
	m.step(slots("web", 6))
	m.now = m.now.Add(5 * time.Second)
	acts := m.step(Tick{})
	if _, ok := find[Claim](acts); ok {
		t.Fatal("claimed with the budget spent")
	}
	free := oldest.Add(cluster.TakeoverWindow)
	w, ok := find[Wake](acts)
	if !ok || !w.At.After(free) {
		t.Fatalf("no wake after the budget frees up: %v", acts)
	}
	m.now = free.Add(time.Nanosecond)
	if _, ok := find[Claim](m.step(ctlView(21, cluster.Control{Takeovers: log, TakeoversIndex: 20}))); ok {
		t.Fatal("claimed as the window moved on, before its rank's delay")
	}
	m.now = w.At
	if c, ok := find[Claim](m.step(Tick{})); !ok || c.Takeover == nil {
		t.Fatal("no takeover at its time")
	}
}

// A takeover from a lost node whose last logged takeover is fresh writes
// nothing: the slots of one lost node do not contend for the log.
func TestFreshTakeoverNotLogged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ago    time.Duration
		faults Faults
		logged bool
	}{
		{"logged just now", FreshTakeover / 2, Faults{}, false},
		{"logged at the edge", FreshTakeover, Faults{}, false},
		{"logged a while ago", FreshTakeover + time.Millisecond, Faults{}, true},
		{"every takeover logged (Faults.LogEveryTakeover)", 0, Faults{LogEveryTakeover: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := opsMachine(t, tc.faults, nil, []string{"me", "n2", "n3"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
			m.step(ctlView(20, cluster.Control{}))
			m.step(slots("web", 5, Slot{K: 0, Node: "n9", ModifyIndex: 5}))
			m.step(slots("web", 6))
			m.now = m.now.Add(5 * time.Second)
			log := cluster.TakeoverLog{Takeovers: []cluster.Takeover{{Slot: "web/1", Node: "n2", From: "n9", At: m.now.Add(-tc.ago)}}}
			acts := m.step(ctlView(30, cluster.Control{Takeovers: log, TakeoversIndex: 30}))
			c, ok := find[Claim](acts)
			if !ok || c.Takeover == nil || c.Takeover.Logged != tc.logged || len(records(acts, "claim")) != 1 ||
				!takeoverWords.MatchString(records(acts, "claim")[0].Reason) {
				t.Fatalf("claim %+v %+v, want logged %v", c, c.Takeover, tc.logged)
			}
		})
	}
}

// A slot no node saw held (a new unit, a raised count) is claimed as one
// never claimed: no budget, its ClaimedKey checked absent. Refused (it was
// claimed before: a node that started after its holder was lost), it is
// claimed again at once as a takeover, which spends the budget. Before,
// every such claim spent it: a new unit filled one slot per window.
func TestNeverClaimedSlotSpendsNoBudget(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2", "n3"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	m.step(ctlView(20, cluster.Control{}))
	acts := m.step(slots("web", 5))
	m.now = m.now.Add(5 * time.Second)
	acts = append(acts, m.step(Tick{})...)
	c, ok := find[Claim](acts)
	if !ok || !c.Fresh || c.Takeover != nil {
		t.Fatalf("claim %+v, want a fresh one without the budget", c)
	}
	if r := records(acts, "claim"); len(r) != 1 || strings.Contains(r[0].Reason, "takeover") {
		t.Fatalf("claim records %+v, want one, not a takeover", r)
	}
	c, ok = find[Claim](m.step(ClaimDone{Slot: c.Slot, NotFresh: true}))
	if !ok || c.Fresh || c.Takeover == nil || c.Takeover.Entry.From != UnknownHolder+"web/0" {
		t.Fatalf("claim after NotFresh %+v, want a takeover from an unknown holder", c)
	}
}

// TestClaimRefusal: why a claim's transaction was refused, from the ops
// that failed, as the executor and the simulator both read it.
func TestClaimRefusal(t *testing.T) {
	logged := &TakeoverCAS{Logged: true}
	for _, tc := range []struct {
		name             string
		c                Claim
		failed           []int
		notFresh, budget bool
	}{
		{"fresh, claimed before", Claim{Fresh: true}, []int{0}, true, false},
		{"fresh, taken", Claim{Fresh: true}, []int{1}, false, false},
		{"takeover, budget CAS alone", Claim{Takeover: logged}, []int{4}, false, true},
		{"takeover, the lock and the CAS", Claim{Takeover: logged}, []int{0, 4}, false, false},
		{"takeover riding a fresh log entry", Claim{Takeover: &TakeoverCAS{}}, []int{4}, false, false},
		{"plain claim", Claim{}, []int{0}, false, false},
		{"nothing failed", Claim{Fresh: true, Takeover: logged}, nil, false, false},
	} {
		nf, b := tc.c.Refusal(5, tc.failed)
		if nf != tc.notFresh || b != tc.budget {
			t.Errorf("%s: notFresh %v budget %v, want %v %v", tc.name, nf, b, tc.notFresh, tc.budget)
		}
	}
}

// The answer of control/ with the takeover that beat a claim's budget CAS
// can come before the refusal: the view is then already the newer one, and
// the claim is tried again on it, not after a further change of control/
// that may never come (CI's TestFleetStormBrake left a slot vacant for
// good: both survivors claimed at the same moment, one lost the CAS and
// waited for an answer past the one it had).
func TestBudgetRefusedAfterTheNewerLog(t *testing.T) {
	m, c := takeoverOfN9(t)
	if c.Takeover.Index != 0 {
		t.Fatalf("the CAS is from index %d, want 0 (no log yet)", c.Takeover.Index)
	}
	// Another node took over a slot of n9 (the same lost node: free); its
	// log is heard before this claim's refusal.
	log := cluster.TakeoverLog{Takeovers: []cluster.Takeover{{Slot: "x/0", Node: "n2", From: "n9", At: m.now.Add(-2 * FreshTakeover)}}}
	m.step(ctlView(30, cluster.Control{Takeovers: log, TakeoversIndex: 30}))
	acts := m.step(ClaimDone{Slot: c.Slot, Budget: true})
	for i := 0; i < 20; i++ {
		if _, ok := find[Claim](acts); ok {
			break
		}
		if w, ok := find[Wake](acts); ok && w.At.After(m.now) {
			m.now = w.At
		} else {
			m.now = m.now.Add(time.Second)
		}
		acts = m.step(Tick{})
	}
	c, ok := find[Claim](acts)
	if !ok || c.Takeover == nil || c.Takeover.Index != 30 {
		t.Fatalf("no claim on the log it already has (index 30): %+v %v", c, acts)
	}
}
