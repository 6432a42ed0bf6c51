package agent

import (
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/schema"
)

var upd = UpdateBlock{MaxParallel: 1, AutoRevert: true, MinHealthyTime: time.Second, HealthyDeadline: 3 * time.Second}

func running(n uint64, from, to string) *Deployment {
	return &Deployment{N: n, Version: to, From: from, Stable: from, Status: cluster.DeployRunning, Promoted: true, Update: upd, Started: t0}
}

func healthyAt(ver string, idx uint64) Status {
	at := t0
	return Status{HoldStatus: cluster.HoldStatus{Index: idx, Version: ver, HealthyAt: &at}}
}

// Judge's decisions, each a function of the record, the statuses and now.
func TestJudge(t *testing.T) {
	canary := running(2, "v1", "v2")
	canary.Canaries, canary.Promoted = 1, false
	autoCanary := *canary
	autoCanary.Update.AutoPromote = true
	noRevert := running(2, "v1", "v2")
	noRevert.Update.AutoRevert = false
	failed := Status{HoldStatus: cluster.HoldStatus{Version: "v2"}, Failed: "not healthy"}
	for _, tc := range []struct {
		name   string
		d      *Deployment
		status map[int]Status
		revert bool
		want   string // the decision; "" none
		check  func(*testing.T, *Deployment)
	}{
		{"not all healthy: wait", running(2, "v1", "v2"), map[int]Status{0: healthyAt("v2", 1), 1: healthyAt("v1", 2)}, true, "", nil},
		{"healthy at the old version does not count", running(2, "v1", "v2"), map[int]Status{0: healthyAt("v1", 1), 1: healthyAt("v1", 2)}, true, "", nil},
		{"all healthy: successful, stable moves", running(2, "v1", "v2"), map[int]Status{0: healthyAt("v2", 1), 1: healthyAt("v2", 2)}, true, "deploy-successful",
			func(t *testing.T, d *Deployment) {
				if d.Status != cluster.DeploySuccessful || d.Stable != "v2" || d.N != 2 {
					t.Errorf("%+v", d)
				}
			}},
		{"canary healthy, manual promote: wait", canary, map[int]Status{0: healthyAt("v2", 1)}, true, "", nil},
		{"canary healthy, auto_promote", &autoCanary, map[int]Status{0: healthyAt("v2", 1)}, true, "deploy-promote",
			func(t *testing.T, d *Deployment) {
				if !d.Promoted || d.Status != cluster.DeployRunning {
					t.Errorf("%+v", d)
				}
			}},
		{"canary not healthy yet: no promote", &autoCanary, map[int]Status{}, true, "", nil},
		{"unhealthy: failed and reverted in one record", running(2, "v1", "v2"), map[int]Status{0: failed, 1: healthyAt("v1", 2)}, true, "deploy-revert",
			func(t *testing.T, d *Deployment) {
				if d.N != 3 || d.Version != "v1" || d.From != "v2" || d.RevertOf != 2 || !d.Promoted || d.Status != cluster.DeployRunning ||
					d.Ended == nil || d.Ended.Status != cluster.DeployFailed || d.Ended.N != 2 {
					t.Errorf("%+v %+v", d, d.Ended)
				}
			}},
		{"unhealthy without auto_revert: failed", noRevert, map[int]Status{0: failed}, true, "deploy-failed",
			func(t *testing.T, d *Deployment) {
				if d.Status != cluster.DeployFailed || d.N != 2 {
					t.Errorf("%+v", d)
				}
			}},
		{"unhealthy, revert off (mutation): failed only", running(2, "v1", "v2"), map[int]Status{0: failed}, false, "deploy-failed", nil},
		{"a failure at another version is not this deployment's", running(3, "v2", "v1"), map[int]Status{0: failed}, true, "", nil},
		{"not running: nothing", &Deployment{N: 1, Version: "v1", Status: cluster.DeploySuccessful}, map[int]Status{0: failed}, true, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := *tc.d
			d.Spec = "shop/2" // the operator's deployment that wrote it
			next, what := Judge(&d, 2, tc.status, t0.Add(time.Minute), tc.revert)
			if what != tc.want || (next == nil) != (tc.want == "") {
				t.Fatalf("decision %q (%+v), want %q", what, next, tc.want)
			}
			if next != nil && next.Spec != "shop/2" {
				// deploy -wait and status find what became of spec 2 by it.
				t.Errorf("%s: the next record lost the deployment's spec: %q", what, next.Spec)
			}
			if tc.check != nil {
				tc.check(t, next)
			}
		})
	}
}

func TestTarget(t *testing.T) {
	c := running(2, "v1", "v2")
	c.Canaries, c.Promoted = 2, false
	for _, tc := range []struct {
		d    *Deployment
		k    int
		want string
	}{
		{running(2, "v1", "v2"), 5, "v2"},
		{c, 1, "v2"},
		{c, 2, "v1"},
		{&Deployment{Version: "v2", Status: cluster.DeploySuccessful}, 3, "v2"},
		{&Deployment{Version: "v2", From: "v1", Status: cluster.DeployFailed}, 0, ""},
	} {
		if got := tc.d.Target(tc.k); got != tc.want {
			t.Errorf("%+v slot %d: %q, want %q", tc.d, tc.k, got, tc.want)
		}
	}
}

// holder is an agent holding slots of web (count slots) from t0 at v1,
// healthy.
func holder(t *testing.T, count int, k ...int) *machine {
	w := &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{}}
	for _, k := range k {
		w.Held[SlotID{"web", k}] = uint64(40 + k)
	}
	m := &machine{t: t, a: New(Config{Node: "me", Seed: 1, Warm: w}), now: t0}
	m.step(UnitsAnswer{Units: []Unit{{Name: "web", Count: count, MaxPerNode: len(k)}}})
	m.step(NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me"}}})
	for _, k := range k {
		m.step(InstanceHealthy{Slot: SlotID{"web", k}, Version: "v1"})
	}
	return m
}

func deployView(idx uint64, d *Deployment, status map[int]Status, tokens map[int]Token) DeployAnswer {
	if status == nil {
		status = map[int]Status{}
	}
	if tokens == nil {
		tokens = map[int]Token{}
	}
	return DeployAnswer{View: &DeployView{Unit: "web", Index: idx, Record: d, RecordIndex: idx - 1, Status: status, Tokens: tokens}}
}

func all[T any](acts []any) []T {
	var out []T
	for _, a := range acts {
		if x, ok := a.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// A rolling update of one slot: a token first, then the update in place
// with the same fencing token, the status before the change, health for
// min_healthy_time, then the status and the token back.
func TestRollingUpdateOfOneSlot(t *testing.T) {
	m := holder(t, 3, 1)
	id := SlotID{"web", 1}
	acts := m.step(deployView(10, running(2, "v1", "v2"), nil, nil))
	tk, ok := find[TakeToken](acts)
	if !ok || tk.Slot != id || tk.T != 0 {
		t.Fatalf("no token asked for: %v", acts)
	}
	if _, ok := find[Update](acts); ok {
		t.Fatal("updated before it had a token")
	}
	acts = m.step(TokenDone{Slot: id, T: tk.T, OK: true})
	p, ok := find[Publish](acts)
	if !ok || p.Index != 41 || p.Kind != "updating" || p.Status.Version != "v2" || p.Status.HealthyAt != nil || p.Audit.Action != "update" ||
		p.Audit.From != "v1" || p.Audit.To != "v2" {
		t.Fatalf("the status before the change: %+v", p)
	}
	if _, ok := find[Update](acts); ok {
		t.Fatal("the instance changed before its status said so")
	}
	// Refused (no leader): said again a second later, not at once.
	if acts := m.step(PublishDone{Slot: id, Index: m.a.held[id].index, Kind: p.Kind, Version: "v2"}); len(all[Publish](acts)) > 0 {
		t.Fatalf("published again at once: %v", acts)
	}
	m.now = m.now.Add(time.Second)
	if _, ok := find[Publish](m.step(Tick{})); !ok {
		t.Fatal("not published again a second later")
	}
	acts = m.step(PublishDone{Slot: id, Index: m.a.held[id].index, Kind: p.Kind, Version: "v2", OK: true})
	u, ok := find[Update](acts)
	if !ok || u.Index != 41 || u.From != "v1" || u.To != "v2" {
		t.Fatalf("update: %+v %v", u, acts)
	}
	if m.a.Held()[id] != Updating {
		t.Fatalf("phase %v", m.a.Held()[id])
	}
	m.now = m.now.Add(50 * time.Millisecond)
	m.step(InstanceStarted{Slot: id})
	m.now = m.now.Add(300 * time.Millisecond)
	acts = m.step(InstanceHealthy{Slot: id, Version: "v2"})
	if len(all[Publish](acts))+len(all[ReturnToken](acts)) > 0 {
		t.Fatalf("published or gave the token back before min_healthy_time: %v", acts)
	}
	w, ok := find[Wake](acts)
	if !ok || !w.At.Equal(m.now.Add(time.Second)) {
		t.Fatalf("no wake at min_healthy_time: %v", acts)
	}
	m.now = w.At
	acts = m.step(Tick{})
	p, ok = find[Publish](acts)
	if !ok || p.Status.HealthyAt == nil || p.Status.Version != "v2" || p.Index != 41 || p.Audit.Action != "healthy" || p.Audit.To != "v2" {
		t.Fatalf("healthy status: %+v %v", p, acts)
	}
	if r, ok := find[ReturnToken](acts); !ok || r.T != 0 {
		t.Fatalf("token not given back: %v", acts)
	}
}

// max_parallel: with every token held by others, a holder waits; a view
// that shows one free lets it ask.
func TestMaxParallelWaitsForToken(t *testing.T) {
	m := holder(t, 3, 2)
	d := running(2, "v1", "v2")
	d.Update.MaxParallel = 2
	acts := m.step(deployView(10, d, nil, map[int]Token{0: {"s-a", 0, 0}, 1: {"s-b", 1, 0}}))
	if len(all[TakeToken](acts))+len(all[Update](acts)) > 0 {
		t.Fatalf("took a token beyond max_parallel: %v", acts)
	}
	acts = m.step(deployView(11, d, nil, map[int]Token{0: {"s-a", 0, 0}}))
	if tk, ok := find[TakeToken](acts); !ok || tk.T != 1 {
		t.Fatalf("no token asked for the free one: %v", acts)
	}
	// Refused (another node took it first): not again on the same view.
	acts = m.step(TokenDone{Slot: SlotID{"web", 2}, T: 1})
	if len(all[TakeToken](acts)) > 0 {
		t.Fatalf("asked again on the same view: %v", acts)
	}
	if tk, ok := find[TakeToken](m.step(deployView(12, d, nil, map[int]Token{0: {"s-a", 0, 0}}))); !ok || tk.T != 1 {
		t.Fatal("not asked again on a newer view")
	}
}

// The mutation check of max_parallel: without tokens a holder updates
// at once.
func TestNoTokenFaultUpdatesAtOnce(t *testing.T) {
	m := holder(t, 3, 2)
	m.a.cfg.Faults.NoToken = true
	m.step(deployView(10, running(2, "v1", "v2"), nil, map[int]Token{0: {"s-a", 0, 0}}))
	if _, ok := find[Update](m.step(PublishDone{Slot: SlotID{"web", 2}, Index: m.a.held[SlotID{"web", 2}].index, Kind: "updating", Version: "v2", OK: true})); !ok {
		t.Fatal("the fault did not bypass the token")
	}
}

// A canary phase: slots below the canaries move, the others wait for the
// promotion.
func TestCanaryWaitsForPromote(t *testing.T) {
	d := running(2, "v1", "v2")
	d.Canaries, d.Promoted = 1, false
	m := holder(t, 3, 1)
	if acts := m.step(deployView(10, d, nil, nil)); len(all[TakeToken](acts)) > 0 {
		t.Fatalf("slot 1 moves in a 1-canary phase: %v", acts)
	}
	p := *d
	p.Promoted = true
	if _, ok := find[TakeToken](m.step(deployView(11, &p, nil, nil))); !ok {
		t.Fatal("slot 1 does not move once promoted")
	}
	m0 := holder(t, 3, 0)
	if _, ok := find[TakeToken](m0.step(deployView(10, d, nil, nil))); !ok {
		t.Fatal("the canary slot does not move")
	}
}

// An instance not healthy within healthy_deadline: its holder says so
// (failed) and keeps its token; the judge (this node holds slot 0) then
// fails the deployment and reverts it in one CAS write, with its record;
// the holder moves back under the token it kept, and gives it back once
// healthy at the stable version.
func TestUnhealthyFailsAndReverts(t *testing.T) {
	m := holder(t, 1, 0)
	id := SlotID{"web", 0}
	d := running(2, "v1", "v2")
	tk, _ := find[TakeToken](m.step(deployView(10, d, nil, nil)))
	m.step(TokenDone{Slot: id, T: tk.T, OK: true})
	m.step(PublishDone{Slot: id, Index: m.a.held[id].index, Kind: "updating", Version: "v2", OK: true})
	m.step(InstanceStarted{Slot: id})
	start := m.now
	m.now = start.Add(2 * time.Second)
	if acts := m.step(Tick{}); len(all[Publish](acts)) > 0 {
		t.Fatalf("failed before healthy_deadline: %v", acts)
	}
	m.now = start.Add(3 * time.Second)
	acts := m.step(Tick{})
	p, ok := find[Publish](acts)
	if !ok || p.Status.Failed == "" || p.Status.Version != "v2" || p.Audit.Action != "rollout-failed" || p.Audit.To != "v2" {
		t.Fatalf("no failed status: %v", acts)
	}
	if len(all[ReturnToken](acts)) > 0 {
		t.Fatal("a failed instance gave its token back while still down")
	}
	acts = m.step(deployView(11, d, map[int]Status{0: p.Status}, map[int]Token{0: {"s-me", 0, 0}}))
	mv, ok := find[MoveDeployment](acts)
	if !ok || mv.CAS != 10 || mv.Next.RevertOf != 2 || mv.Next.Version != "v1" || mv.Audit.Action != "deploy-failed" ||
		mv.Also.Action != "deploy-revert" || mv.Also.To != "v1" {
		t.Fatalf("judge: %+v %v", mv, acts)
	}
	// Not twice on the same view.
	if len(all[MoveDeployment](m.step(Tick{}))) > 0 {
		t.Fatal("moved twice on one view")
	}
	m.step(MoveDone{Unit: "web", OK: true})
	next := mv.Next
	m.step(deployView(12, &next, map[int]Status{0: p.Status}, map[int]Token{0: {"s-me", 0, 0}}))
	acts = m.step(PublishDone{Slot: id, Index: m.a.held[id].index, Kind: "updating", Version: "v1", OK: true})
	u, ok := find[Update](acts)
	if !ok || u.To != "v1" || u.Index != 40 {
		t.Fatalf("no update back under the kept token: %v", acts)
	}
	m.step(InstanceStarted{Slot: id})
	m.step(InstanceHealthy{Slot: id, Version: "v1"})
	m.now = m.now.Add(time.Second)
	acts = m.step(Tick{})
	if _, ok := find[ReturnToken](acts); !ok {
		t.Fatalf("token not given back once healthy at v1: %v", acts)
	}
}

// Only the holder of slot 0 judges, and a refused move waits for a newer
// view or a second.
func TestOnlySlotZeroJudges(t *testing.T) {
	done := running(2, "v1", "v2")
	st := map[int]Status{0: healthyAt("v2", 40), 1: healthyAt("v2", 41)}
	m1 := holder(t, 2, 1)
	if acts := m1.step(deployView(10, done, st, nil)); len(all[MoveDeployment](acts)) > 0 {
		t.Fatalf("the holder of slot 1 judged: %v", acts)
	}
	m0 := holder(t, 2, 0)
	mv, ok := find[MoveDeployment](m0.step(deployView(10, done, st, nil)))
	if !ok || mv.Next.Status != cluster.DeploySuccessful || mv.CAS != 9 {
		t.Fatalf("slot 0 did not judge: %+v", mv)
	}
	acts := m0.step(MoveDone{Unit: "web"})
	if len(all[MoveDeployment](acts)) > 0 {
		t.Fatal("sent again at once on the same view")
	}
	m0.now = m0.now.Add(time.Second)
	if _, ok := find[MoveDeployment](m0.step(Tick{})); !ok {
		t.Fatal("not sent again a second after a refusal")
	}
}

// A claim during a deployment starts at the slot's target.
func TestClaimStartsAtTarget(t *testing.T) {
	m := newMachine(t, Unit{Name: "web", Count: 3, MaxPerNode: 1})
	d := running(2, "v1", "v2")
	d.Canaries, d.Promoted = 1, false
	m.step(deployView(10, d, nil, nil))
	acts := m.step(ClaimDone{Slot: SlotID{"web", 2}, OK: true, Index: 7})
	_ = acts // not claiming: ClaimDone is ignored
	m.a.held[SlotID{"web", 2}] = &held{phase: Claiming}
	st, ok := find[Start](m.step(ClaimDone{Slot: SlotID{"web", 2}, OK: true, Index: 7}))
	if !ok || st.Version != "v1" {
		t.Fatalf("slot 2 (held back) starts at %q", st.Version)
	}
	m.a.held[SlotID{"web", 0}] = &held{phase: Claiming}
	st, _ = find[Start](m.step(ClaimDone{Slot: SlotID{"web", 0}, OK: true, Index: 8}))
	if st.Version != "v2" {
		t.Fatalf("the canary slot starts at %q", st.Version)
	}
}

func TestParseDeployView(t *testing.T) {
	v := ParseDeployView("web", 9, []KV{
		{Key: RecordKey("web"), Value: []byte(`{"n":2,"version":"v2","status":"running"}`), ModifyIndex: 8},
		{Key: SlotID{"web", 1}.StatusKey(), Value: []byte(`{"index":41,"version":"v2","failed":"x"}`)},
		{Key: TokenKey("web", 0), Value: []byte("1"), Session: "s"},
		{Key: TokenKey("web", 1), Value: []byte("2")}, // not locked: no token
		{Key: RecordKey("other")},
	})
	if v.Record == nil || v.Record.N != 2 || v.RecordIndex != 8 || v.Status[1].Index != 41 || v.Status[1].Failed != "x" ||
		len(v.Tokens) != 1 || v.Tokens[0] != (Token{"s", 1, 0}) {
		t.Fatalf("%+v", v)
	}
}

// A view from before a token's return still shows it held by this node:
// the token is not taken for its own (an update on it would run with no
// token); it is given back with delete-cas on the index the view shows
// unless the return of that very take was answered (issue 28: every
// return was sent twice, the second failing), and a fresh one is asked
// for. Mutation-checked: without ReturnDone's index kept (gone), the
// first row gives it back again.
func TestStaleTokenViewIsNotAdopted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answered bool // the first return's answer said deleted
	}{
		{"return answered: the stale view's take is not given back again", true},
		{"return's answer lost: given back with delete-cas", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := holder(t, 3, 1)
			id := SlotID{"web", 1}
			d := running(2, "v1", "v2")
			// Deployment 2 done for this slot: token 0 taken and given back.
			m.step(deployView(10, d, nil, nil))
			m.step(TokenDone{Slot: id, T: 0, OK: true, Index: 77})
			m.step(PublishDone{Slot: id, Index: m.a.held[id].index, Kind: "updating", Version: "v2", OK: true})
			m.step(InstanceStarted{Slot: id})
			m.step(InstanceHealthy{Slot: id, Version: "v2"})
			m.now = m.now.Add(time.Second)
			acts := m.step(Tick{})
			if r, ok := find[ReturnToken](acts); !ok || r.Index != 77 {
				t.Fatalf("no return with the take's index: %v", acts)
			}
			m.step(ReturnDone{Slot: id, T: 0, OK: tc.answered, Index: 77})
			// Deployment 3 comes in a view from before the return landed.
			d3 := running(3, "v2", "v3")
			acts = m.step(deployView(11, d3, nil, map[int]Token{0: {"s-me", 1, 77}}))
			if len(all[Update](acts)) > 0 || len(all[Publish](acts)) > 0 {
				t.Fatalf("moved on a token it gave back: %v", acts)
			}
			r, ok := find[ReturnToken](acts)
			if tc.answered {
				// The delete-cas on 77 was answered: the key of that take
				// is gone, and a second delete-cas could only fail (a Raft
				// entry that changes nothing, per instance updated).
				if ok {
					t.Fatalf("gave back again a take whose return was answered: %+v", r)
				}
			} else {
				if !ok || r.T != 0 || r.Index != 77 {
					t.Fatalf("the stale token is not given back with delete-cas: %v", acts)
				}
				// Refused (the first return had landed).
				if acts := m.step(ReturnDone{Slot: id, T: 0, Index: 77}); len(all[TakeToken](acts)) > 0 {
					t.Fatalf("asked for a token the view shows held: %v", acts)
				}
			}
			// The next view shows the token free: the slot asks afresh.
			if tk, ok := find[TakeToken](m.step(deployView(12, d3, nil, nil))); !ok || tk.T != 0 {
				t.Fatal("no fresh token asked for")
			}
		})
	}
}

// When min_healthy_time starts counting for an instance the catalog shows
// passing: when its checks passed where they run, if known, within the
// update and now.
func TestHealthyFrom(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	var zero time.Time
	for _, tc := range []struct {
		name                string
		since, started, now time.Time
		want                time.Time
	}{
		{"not known: from the report", zero, ms(0), ms(300), ms(300)},
		{"passed where they run before the catalog showed it: from there", ms(60), ms(0), ms(300), ms(60)},
		{"never before the update", ms(-500), ms(0), ms(300), ms(0)},
		{"running from before this agent: the catalog's lag at most", ms(-500), zero, ms(300), ms(300).Add(-cluster.MaxCatalogLag)},
		{"a catalog far behind: the lag forgiven at most MaxCatalogLag", ms(60), ms(0), ms(1800), ms(1800).Add(-cluster.MaxCatalogLag)},
		{"the update long before, passed since: from the pass", ms(1500), ms(0), ms(1800), ms(1500)},
		{"never after now", ms(400), ms(0), ms(300), ms(300)},
	} {
		if got := healthyFrom(tc.since, tc.started, tc.now); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got.Sub(t0), tc.want.Sub(t0))
		}
	}
}

// An instance whose checks passed where they run before the catalog
// showed it is healthy min_healthy_time after they passed.
func TestHealthyCountsFromLocalPass(t *testing.T) {
	m := holder(t, 3, 1)
	id := SlotID{"web", 1}
	tk, _ := find[TakeToken](m.step(deployView(10, running(2, "v1", "v2"), nil, nil)))
	p, _ := find[Publish](m.step(TokenDone{Slot: id, T: tk.T, OK: true}))
	if _, ok := find[Update](m.step(PublishDone{Slot: id, Index: m.a.held[id].index, Kind: p.Kind, Version: "v2", OK: true})); !ok {
		t.Fatal("no update")
	}
	m.now = m.now.Add(50 * time.Millisecond)
	m.step(InstanceStarted{Slot: id})
	passed := m.now.Add(10 * time.Millisecond)
	m.now = m.now.Add(200 * time.Millisecond)
	acts := m.step(InstanceHealthy{Slot: id, Version: "v2", Since: passed})
	w, ok := find[Wake](acts)
	if !ok || !w.At.Equal(passed.Add(time.Second)) {
		t.Fatalf("wake %v, want min_healthy_time after the checks passed (%v): %v", w.At, passed.Add(time.Second), acts)
	}
	m.now = w.At
	acts = m.step(Tick{})
	if p, ok := find[Publish](acts); !ok || p.Status.HealthyAt == nil || !p.Status.HealthyAt.Equal(w.At) {
		t.Fatalf("healthy status: %+v %v", p, acts)
	}
	if _, ok := find[ReturnToken](acts); !ok {
		t.Fatalf("token not given back: %v", acts)
	}
}

// A slot failed at a running deployment's version fails it (Judge): no
// holder takes a token to go down for that version meanwhile (the judge,
// slot 0's holder, may be absent for a while: a lost node's slot 0 waits
// for the takeover budget). Found by the simulator (-slots 25 -deploys
// -ops -volumes -placement, seed 14: a third instance taken down into a
// version two slots had failed at, 18 s before the judge came back).
//
// Mutation-checked: without the check, the row with a failure at the
// target takes a token; counting slots beyond the count, the last row
// takes none.
func TestNoUpdateIntoFailedVersion(t *testing.T) {
	failed := func(ver string) Status {
		return Status{HoldStatus: cluster.HoldStatus{Index: 40, Version: ver}, Failed: "not healthy within healthy_deadline"}
	}
	for _, tc := range []struct {
		name   string
		status map[int]Status
		take   bool
	}{
		{"no failure: a token", nil, true},
		{"a slot failed at the target: no token", map[int]Status{0: failed("v2")}, false},
		{"a failure at another version: a token", map[int]Status{0: failed("v0")}, true},
		{"a failure of a slot beyond the count: a token", map[int]Status{5: failed("v2")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := holder(t, 3, 1)
			acts := m.step(deployView(10, running(2, "v1", "v2"), tc.status, nil))
			if _, ok := find[TakeToken](acts); ok != tc.take {
				t.Fatalf("token taken %v, want %v: %v", ok, tc.take, acts)
			}
			if u, ok := find[Update](acts); ok {
				t.Fatalf("updated: %+v", u)
			}
		})
	}
}

// An orphan claimed back while down for an update (its rollout token gone
// with its old session) takes a token again: it is still down, and
// max_parallel counts it. Healthy at the target before its session was
// lost, it takes none. Found by the simulator with the previous test's.
//
// Mutation-checked: with the holds' tokens dropped on a new session and
// not marked to be taken again, the first row takes no token.
func TestOrphanTakesTokenAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		healthy bool // at the target before the session's loss
		take    bool
	}{
		{"down for an update: a token again", false, true},
		{"healthy at the target: none", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Unit{Name: "web", Count: 1, MaxPerNode: 1, Placement: &schema.Placement{}}
			id := SlotID{"web", 0}
			done := &Deployment{N: 1, Version: "v1", From: "v1", Stable: "v1", Status: cluster.DeploySuccessful, Update: upd}
			m := newMachineWith(t, Config{TTL: 10 * time.Second, LockDelay: time.Second}, []string{"me", "x"}, u)
			m.step(deployView(11, done, nil, nil))
			c, _, ok := runUntil[Claim](m, m.step(slots("web", 5)), m.now.Add(10*time.Second))
			if !ok {
				t.Fatal("no claim")
			}
			m.step(ClaimDone{Slot: c.Slot, OK: true, Index: 42})
			m.step(InstanceStarted{Slot: id})
			m.step(slots("web", 42, Slot{K: 0, Node: "me", ModifyIndex: 42}))
			tk, ok := find[TakeToken](m.step(deployView(12, running(2, "v1", "v2"), nil, nil)))
			if !ok {
				t.Fatal("no token for the update")
			}
			m.step(TokenDone{Slot: id, T: tk.T, OK: true, Index: 50})
			if _, ok := find[Update](m.step(PublishDone{Slot: id, Index: m.a.held[id].index, Kind: "updating", Version: "v2", OK: true})); !ok {
				t.Fatal("no update")
			}
			m.step(InstanceStarted{Slot: id})
			if tc.healthy {
				acts := m.step(InstanceHealthy{Slot: id, Version: "v2"})
				if _, _, ok := runUntil[ReturnToken](m, acts, m.now.Add(5*time.Second)); !ok {
					t.Fatal("healthy, the token not returned")
				}
				m.step(ReturnDone{Slot: id, T: tk.T, OK: true})
			}
			// Cut off: the session lost with its token; healed, the slot
			// free, claimed back with the new session.
			m.now = m.now.Add(time.Second)
			m.step(SessionLost{})
			m.step(SessionCreated{ID: "s-2"})
			m.now = m.now.Add(100 * time.Millisecond)
			m.step(deployView(13, running(2, "v1", "v2"), nil, nil))
			if _, ok := find[Claim](m.step(slots("web", 60, Slot{K: 0}))); !ok {
				t.Fatal("orphan not claimed back")
			}
			acts := m.step(ClaimDone{Slot: id, OK: true, Index: 70})
			acts = append(acts, m.step(slots("web", 70, Slot{K: 0, Node: "me", ModifyIndex: 70}))...)
			again, ok := find[TakeToken](acts)
			if ok != tc.take || ok && (again.Session != "s-2" || again.Slot != id) {
				t.Fatalf("token taken again %+v %v, want %v (%v)", again, ok, tc.take, acts)
			}
			if ok {
				if u, ok := find[Update](m.step(TokenDone{Slot: id, T: again.T, OK: true, Index: 80})); ok {
					t.Fatalf("updated again: %+v", u)
				}
			}
		})
	}
}
