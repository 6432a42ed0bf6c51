package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
)

func holdsOf(acts []any) map[SlotID]HoldRestarts {
	out := map[SlotID]HoldRestarts{}
	for _, a := range acts {
		if h, ok := a.(HoldRestarts); ok {
			out[h.Slot] = h
		}
	}
	return out
}

// A pause of scope all holds the restarts of the paused unit's instances
// (told once, and again when it changes); placement or deploy pauses, and
// other units, hold none; the resume lets them go; a drop names the
// target.
func TestPauseHoldsRestarts(t *testing.T) {
	web0, db0 := SlotID{"web", 0}, SlotID{"db", 0}
	for _, tc := range []struct {
		name   string
		faults Faults
		ctl    cluster.Control
		held   []SlotID
	}{
		{"fleet paused, scope all", Faults{}, pause("", cluster.PauseAll), []SlotID{db0, web0}},
		{"unit paused, scope all", Faults{}, pause("web", cluster.PauseAll), []SlotID{web0}},
		{"placement only", Faults{}, pause("", cluster.PausePlacement), nil},
		{"deploys only", Faults{}, pause("web", cluster.PauseDeploy), nil},
		{"restarts not held (mutation)", Faults{NoRestartHold: true}, pause("", cluster.PauseAll), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := opsMachine(t, tc.faults, &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{web0: 9, db0: 10}}, []string{"me"},
				Unit{Name: "web", Count: 1, MaxPerNode: 1}, Unit{Name: "db", Count: 1, MaxPerNode: 1})
			m.step(ctlView(20, cluster.Control{}))
			holds := holdsOf(m.step(ctlView(21, tc.ctl)))
			if len(holds) != len(tc.held) {
				t.Fatalf("held %v, want %v", holds, tc.held)
			}
			for _, id := range tc.held {
				if h := holds[id]; !strings.Contains(h.Why, "paused by op") {
					t.Fatalf("%s: %+v", id, h)
				}
			}
			if again := holdsOf(m.step(Tick{})); len(again) > 0 {
				t.Fatalf("told again: %v", again)
			}
			if len(tc.held) == 0 {
				return
			}
			// A drop of one held restart.
			m.step(RestartHeld{Slot: web0, Target: "web@web/0", Detail: "restart after exit 1"})
			c := tc.ctl
			c.Drops = map[string]cluster.Drop{cluster.IntentID("me", "restart", "web@web/0"): {By: "alice"}}
			if h := holdsOf(m.step(ctlView(22, c)))[web0]; h.Why == "" || h.Dropped["web@web/0"] != "alice" {
				t.Fatalf("after the drop: %+v", h)
			}
			resumed := holdsOf(m.step(ctlView(23, cluster.Control{})))
			if len(resumed) != len(tc.held) || resumed[web0].Why != "" {
				t.Fatalf("at the resume: %v", resumed)
			}
		})
	}
}

// While paused, the node's queue lists the claims the pause holds back and
// the restarts its instances hold; it is written when it changes (again a
// second after a failed write), and deleted after the resume.
func TestQueuePublished(t *testing.T) {
	m := opsMachine(t, Faults{}, nil, []string{"me", "n2"}, Unit{Name: "web", Count: 1, MaxPerNode: 1})
	m.step(ctlView(20, pause("", cluster.PauseAll)))
	acts := m.step(slots("web", 6, Slot{K: 0, Released: true}))
	m.now = m.now.Add(5 * time.Second)
	acts = append(acts, m.step(Tick{})...)
	p, ok := find[PublishIntents](acts)
	if !ok || len(p.List) != 1 || p.List[0].Kind != "claim" || p.List[0].Target != "web/0" || p.List[0].Node != "me" ||
		p.List[0].ID != cluster.IntentID("me", "claim", "web/0") || len(records(acts, "queue")) != 1 {
		t.Fatalf("queue %+v %v: %v", p, ok, acts)
	}
	since := p.List[0].Since
	// Not again while the first write is on its way; refused: a second
	// later.
	if _, again := find[PublishIntents](m.step(Tick{})); again {
		t.Fatal("written twice at once")
	}
	acts = m.step(IntentsPublished{List: p.List})
	if _, again := find[PublishIntents](acts); again {
		t.Fatal("written again at once after a failure")
	}
	if w, ok := find[Wake](acts); !ok || w.At.After(m.now.Add(time.Second)) {
		t.Fatalf("no retry: %v", acts)
	}
	m.now = m.now.Add(time.Second)
	p, ok = find[PublishIntents](m.step(Tick{}))
	if !ok || len(p.List) != 1 || !p.List[0].Since.Equal(since) {
		t.Fatalf("retry %+v %v", p, ok)
	}
	m.step(IntentsPublished{List: p.List, OK: true})
	if _, again := find[PublishIntents](m.step(Tick{})); again {
		t.Fatal("written again unchanged")
	}
	// A restart held (of a slot this node does not hold: not listed).
	if _, ok := find[PublishIntents](m.step(RestartHeld{Slot: SlotID{"db", 0}, Target: "db@db/0", Detail: "restart"})); ok {
		t.Fatal("a restart of a slot not held listed")
	}
	// The resume: the claim goes, the queue is deleted.
	acts = m.step(ctlView(21, cluster.Control{}))
	p, ok = find[PublishIntents](acts)
	if !ok || len(p.List) != 0 {
		t.Fatalf("at the resume %+v %v", p, ok)
	}
	m.step(IntentsPublished{List: p.List, OK: true})
	m.now = m.now.Add(time.Second)
	if _, again := find[PublishIntents](m.step(Tick{})); again {
		t.Fatal("deleted twice")
	}
}

// The restarts a held slot's instances hold are listed in the queue.
func TestQueueListsHeldRestarts(t *testing.T) {
	web0 := SlotID{"web", 0}
	m := warmOps(t, Faults{})
	m.step(ctlView(21, pause("web", cluster.PauseAll)))
	p, ok := find[PublishIntents](m.step(RestartHeld{Slot: web0, Target: "web@web/0", Detail: "restart after exit 1"}))
	if !ok || len(p.List) != 1 || p.List[0].Kind != "restart" || p.List[0].Target != "web@web/0" {
		t.Fatalf("queue %+v %v", p, ok)
	}
}

// While deploys are paused (scope deploy or all) a held slot takes no
// rollout token for its new version (recorded once, listed in the queue
// as an update); the resume lets it go on. A pause of placement only
// holds no update.
func TestDeployPauseHoldsUpdates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults Faults
		ctl    cluster.Control
		held   bool
	}{
		{"deploys paused", Faults{}, pause("web", cluster.PauseDeploy), true},
		{"everything paused", Faults{}, pause("", cluster.PauseAll), true},
		{"placement only", Faults{}, pause("", cluster.PausePlacement), false},
		{"pause ignored (mutation)", Faults{IgnorePause: true}, pause("web", cluster.PauseDeploy), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{"web", 1}: 41}}
			m := &machine{t: t, a: New(Config{Node: "me", Seed: 1, Warm: w, Control: true, Faults: tc.faults}), now: t0}
			m.step(UnitsAnswer{Units: []Unit{{Name: "web", Count: 3, MaxPerNode: 1}}})
			m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me"}}})
			m.step(InstanceHealthy{Slot: SlotID{"web", 1}, Version: "v1"})
			m.step(ctlView(20, tc.ctl))
			acts := m.step(deployView(10, running(2, "v1", "v2"), nil, nil))
			if _, took := find[TakeToken](acts); took == tc.held {
				t.Fatalf("took a token %v: %v", took, acts)
			}
			if !tc.held {
				return
			}
			if h := records(acts, "hold"); len(h) != 1 || !strings.Contains(h[0].Reason, "update to v2 waits for the resume") {
				t.Fatalf("hold records %v", acts)
			}
			p, ok := find[PublishIntents](acts)
			if !ok || len(p.List) != 1 || p.List[0].Kind != "update" || p.List[0].Target != "web/1" {
				t.Fatalf("queue %+v %v", p, ok)
			}
			m.now = m.now.Add(time.Second)
			if again := m.step(Tick{}); len(records(again, "hold")) > 0 || len(all[TakeToken](again)) > 0 {
				t.Fatalf("again: %v", again)
			}
			if _, took := find[TakeToken](m.step(ctlView(21, cluster.Control{}))); !took {
				t.Fatal("no token after the resume")
			}
		})
	}
}

// While deploys are paused, the judge fails a failing deployment without
// its auto_revert; otherwise it reverts.
func TestDeployPauseHoldsRevert(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ctl    cluster.Control
		revert bool
	}{{"not paused", cluster.Control{}, true}, {"deploys paused", pause("web", cluster.PauseDeploy), false}, {"placement paused", pause("", cluster.PausePlacement), true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{{"web", 0}: 40}}
			m := &machine{t: t, a: New(Config{Node: "me", Seed: 1, Warm: w, Control: true}), now: t0}
			m.step(UnitsAnswer{Units: []Unit{{Name: "web", Count: 1, MaxPerNode: 1}}})
			m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me"}}})
			m.step(InstanceHealthy{Slot: SlotID{"web", 0}, Version: "v2"})
			m.step(ctlView(20, tc.ctl))
			failed := Status{HoldStatus: cluster.HoldStatus{Index: 40, Version: "v2"}, Failed: "not healthy"}
			acts := m.step(deployView(11, running(2, "v1", "v2"), map[int]Status{0: failed}, nil))
			mv, ok := find[MoveDeployment](acts)
			if !ok {
				t.Fatalf("no judgement: %v", acts)
			}
			if reverted := mv.Also.Action == "deploy-revert"; reverted != tc.revert {
				t.Fatalf("%s, want a revert: %v", mv.Audit.Action, tc.revert)
			}
		})
	}
}

// The queue's claims (CLUSTER.md section 6; cluster/pause.go): a claim of a
// free slot whose time has come is held while placement is paused (the
// fleet's or the unit's pause, of scope placement or all; not deploy),
// and listed with the node's place among the nodes that may hold it
// ("rank 1 of 3", what mariposa queue prints); each node lists its own.
// Mutation check: with the detail the pause's reason (the old one), or
// with a pause of deploys holding claims, the table fails.
func TestQueueClaimIntents(t *testing.T) {
	nodes := []string{"me", "n2", "n3"}
	web := Unit{Name: "web", Count: 2, MaxPerNode: 1}
	rank := DefaultRank(web, NewSlotsView("web", 6, []Slot{{K: 0, Released: true}, {K: 1, Released: true}}),
		&NodesView{Index: 1, Nodes: nodes}, []int{0, 1})
	for _, tc := range []struct {
		name string
		ctl  cluster.Control
		want []string // "<kind> <target>: <detail>"
	}{
		{"the fleet's placement paused", pause("", cluster.PausePlacement), claimsOf(rank, 0, 1)},
		{"the fleet paused (all)", pause("", cluster.PauseAll), claimsOf(rank, 0, 1)},
		{"the unit's placement paused", pause("web", cluster.PausePlacement), claimsOf(rank, 0, 1)},
		{"another unit paused", pause("db", cluster.PausePlacement), nil},
		{"deploys paused: claims go on", pause("", cluster.PauseDeploy), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := opsMachine(t, Faults{}, nil, nodes, web)
			var list []cluster.Intent
			published, claims := false, 0
			step := func(in any) {
				for _, a := range m.step(in) {
					switch a := a.(type) {
					case PublishIntents:
						list, published = a.List, true
						m.step(IntentsPublished{List: a.List, OK: true})
					case Claim:
						claims++
					}
				}
			}
			step(ctlView(20, tc.ctl))
			step(slots("web", 6, Slot{K: 0, Released: true}, Slot{K: 1, Released: true}))
			for range 10 { // every rank's time
				m.now = m.now.Add(time.Second)
				step(Tick{})
			}
			var got []string
			for _, in := range list {
				if in.Node != "me" || in.ID != cluster.IntentID("me", in.Kind, in.Target) {
					t.Fatalf("entry %+v", in)
				}
				got = append(got, in.Kind+" "+in.Target+": "+in.Detail)
			}
			if !slices.Equal(got, tc.want) || published != (tc.want != nil) {
				t.Fatalf("queue %q (published %v), want %q", got, published, tc.want)
			}
			if (claims == 0) != (tc.want != nil) {
				t.Fatalf("%d claims with queue %q", claims, got)
			}
		})
	}
}

// claimsOf is "claim web/k: rank r of n" for the slots where "me" ranks
// first (max_per_node 1: it claims one; the pause holds each whose time
// came).
func claimsOf(r Ranking, ks ...int) []string {
	var out []string
	for _, k := range ks {
		p, ok := r.Of(k, "me")
		if !ok {
			continue
		}
		n := 0
		for _, q := range r.places[k] {
			if q.Rank >= 0 {
				n++
			}
		}
		out = append(out, fmt.Sprintf("claim web/%d: rank %d of %d", k, p.Rank+1, n))
	}
	return out
}

// A slot whose volumes are being readied when the pause comes has no
// instance yet: it is told to hold its restarts with its Start, not before
// (an instance started after the word would run unheld: simulator -ops
// seeds 206 and 282). Mutation check: with Restoring counted as having an
// instance, the hold comes before the Start and the test fails.
func TestPauseTellsTheRestoredInstance(t *testing.T) {
	id := SlotID{"db", 0}
	m := opsMachine(t, Faults{}, nil, []string{"me"}, dbVol)
	m.step(ctlView(20, cluster.Control{}))
	claimed(t, m)
	if p := m.a.Held()[id]; p != Restoring {
		t.Fatalf("phase %v, want restoring", p)
	}
	if h, ok := holdsOf(m.step(ctlView(21, pause("", cluster.PauseAll))))[id]; ok {
		t.Fatalf("told while restoring, before its instance exists: %+v", h)
	}
	acts := m.step(RestoreDone{Slot: id, Index: 42, OK: true})
	start, hold := -1, -1
	for i, a := range acts {
		switch a := a.(type) {
		case Start:
			if a.Slot == id {
				start = i
			}
		case HoldRestarts:
			if a.Slot == id && a.Why != "" {
				hold = i
			}
		}
	}
	if start < 0 || hold < start {
		t.Fatalf("start at %d, hold at %d: the instance must be told after it starts: %v", start, hold, acts)
	}
}
