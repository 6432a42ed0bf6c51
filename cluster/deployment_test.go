package cluster

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// unitSpec is a one-service unit for the deployment tests.
func depSpec(n uint64, version string, count, canary int, auto bool) *Spec {
	up := schema.Update{MaxParallel: 1, HealthCheck: schema.UpdateChecks, MinHealthyTime: time.Second,
		HealthyDeadline: time.Minute, ProgressDeadline: 10 * time.Minute, Canary: canary, AutoPromote: auto, AutoRevert: true}
	sp := &Spec{Format: SpecFormat, Name: "shop", N: n, Hash: "h-" + version,
		Services: []*schema.Service{{Name: "web", Command: []string{"web", version},
			Placement: &schema.Placement{Count: count, Update: up}}}}
	return sp
}

func TestDeployStep(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	sp := depSpec(2, "v2", 3, 1, false)
	v2 := runHash(sp.Units()[0])
	v1 := runHash(depSpec(1, "v1", 3, 1, false).Units()[0])
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	slot := func(version string, healthy *time.Time) slotKV {
		return slotKV{session: "s", value: SlotValue{Node: "n", State: SlotHeld}, status: &HoldStatus{Version: version, HealthyAt: healthy}}
	}
	running := func(mut func(*DeployState)) *Deployment {
		st := &DeployState{N: 2, Hash: sp.Hash, Status: DeployRunning, Started: t0, Canaries: map[string]int{"web": 1}}
		if mut != nil {
			mut(st)
		}
		return &Deployment{Spec: sp, State: st}
	}
	auto := depSpec(2, "v2", 3, 1, true)
	cases := []struct {
		name  string
		d     *Deployment
		slots map[int]slotKV
		now   time.Duration
		want  string
		why   string
	}{
		{name: "no state: an older deploy, not judged", d: &Deployment{Spec: sp},
			slots: map[int]slotKV{0: slot(v2, at(0)), 1: slot(v2, at(0)), 2: slot(v2, at(0))}, want: actNone},
		{name: "every slot healthy at the version: successful", d: running(nil),
			slots: map[int]slotKV{0: slot(v2, at(time.Second)), 1: slot(v2, at(time.Second)), 2: slot(v2, at(time.Second))},
			now:   time.Minute, want: actSucceed},
		{name: "one slot still on the old version", d: running(nil),
			slots: map[int]slotKV{0: slot(v2, at(time.Second)), 1: slot(v2, at(time.Second)), 2: slot(v1, at(-time.Hour))},
			now:   time.Minute, want: actNone},
		{name: "at the version but not healthy yet", d: running(nil),
			slots: map[int]slotKV{0: slot(v2, at(time.Second)), 1: slot(v2, at(time.Second)), 2: slot(v2, nil)},
			now:   time.Minute, want: actNone},
		{name: "a free slot is not healthy", d: running(nil),
			slots: map[int]slotKV{0: slot(v2, at(time.Second)), 1: slot(v2, at(time.Second)),
				2: {value: SlotValue{Node: "n", State: SlotReleased, Version: v2, HealthyAt: at(0)}}},
			now: time.Minute, want: actNone},
		{name: "a slot failed since the start: failed", d: running(nil),
			slots: map[int]slotKV{0: slot(v2, at(time.Second)),
				1: {value: SlotValue{Node: "n", State: SlotFailed, Since: t0.Add(time.Second), Reason: "restarts exhausted"}}},
			now: time.Minute, want: actFail, why: "slot web/1 failed: restarts exhausted"},
		{name: "a slot that failed before the deployment does not fail it", d: running(nil),
			slots: map[int]slotKV{1: {value: SlotValue{Node: "n", State: SlotFailed, Since: t0.Add(-time.Second)}}},
			now:   time.Minute, want: actNone},
		{name: "no progress for progress_deadline (+ clock skew margin): failed", d: running(nil),
			slots: map[int]slotKV{0: slot(v2, at(time.Minute)), 1: slot(v1, at(-time.Hour))},
			now:   time.Minute + 10*time.Minute + clockSkew + time.Millisecond, want: actFail,
			why: "no progress within progress_deadline (10m0s): 1 of 3 instances of web healthy"},
		{name: "progress pushes the deadline: not yet", d: running(nil),
			slots: map[int]slotKV{0: slot(v2, at(time.Minute)), 1: slot(v1, at(-time.Hour))},
			now:   time.Minute + 10*time.Minute, want: actNone},
		{name: "canary healthy, no auto_promote: waits", d: running(nil),
			slots: map[int]slotKV{0: slot(v2, at(time.Second)), 1: slot(v1, at(0)), 2: slot(v1, at(0))},
			now:   time.Minute, want: actNone},
		{name: "canary healthy, auto_promote: promoted",
			d:     &Deployment{Spec: auto, State: &DeployState{N: 2, Status: DeployRunning, Started: t0, Canaries: map[string]int{"web": 1}}},
			slots: map[int]slotKV{0: slot(runHash(auto.Units()[0]), at(time.Second)), 1: slot(v1, at(0))},
			now:   time.Minute, want: actPromote},
		{name: "canary not healthy, auto_promote: waits",
			d:     &Deployment{Spec: auto, State: &DeployState{N: 2, Status: DeployRunning, Started: t0, Canaries: map[string]int{"web": 1}}},
			slots: map[int]slotKV{0: slot(runHash(auto.Units()[0]), nil), 1: slot(v1, at(0))},
			now:   time.Minute, want: actNone},
		{name: "already promoted: not again",
			d: &Deployment{Spec: auto, State: &DeployState{N: 2, Status: DeployRunning, Started: t0, Promoted: true,
				Canaries: map[string]int{"web": 1}}},
			slots: map[int]slotKV{0: slot(runHash(auto.Units()[0]), at(time.Second)), 1: slot(v1, at(0))},
			now:   time.Minute, want: actNone},
		{name: "failed: nothing more", d: running(func(s *DeployState) { s.Status = DeployFailed }),
			slots: map[int]slotKV{0: slot(v2, at(time.Second)), 1: slot(v2, at(time.Second)), 2: slot(v2, at(time.Second))},
			now:   time.Minute, want: actNone},
		{name: "the state of another spec: not judged", d: running(func(s *DeployState) { s.N = 1 }),
			slots: map[int]slotKV{0: slot(v2, at(time.Second)), 1: slot(v2, at(time.Second)), 2: slot(v2, at(time.Second))},
			now:   time.Minute, want: actNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := deployStep(tc.d, map[string]map[int]slotKV{"web": tc.slots}, t0.Add(tc.now))
			if a.kind != tc.want || (tc.why != "" && a.reason != tc.why) {
				t.Fatalf("got %q (%s), want %q (%s)", a.kind, a.reason, tc.want, tc.why)
			}
		})
	}
}

func TestCanariesAndHoldBack(t *testing.T) {
	v1, v2 := depSpec(1, "v1", 3, 2, false), depSpec(2, "v2", 3, 2, false)
	if c := canaries(nil, v2); c != nil {
		t.Errorf("a first deployment has canaries %v", c)
	}
	if c := canaries(v1, depSpec(2, "v1", 5, 2, false)); c != nil {
		t.Errorf("a count change has canaries %v", c)
	}
	if c := canaries(v1, v2); c["web"] != 2 {
		t.Errorf("canaries %v, want web: 2", c)
	}
	if c := canaries(v1, depSpec(2, "v2", 1, 2, false)); c["web"] != 1 {
		t.Errorf("canaries %v, want web: 1 (no more than count)", c)
	}
	d := &Deployment{Spec: v2, State: &DeployState{N: 2, Status: DeployRunning, Canaries: map[string]int{"web": 2}}}
	for k, want := range []bool{false, false, true} {
		if got := d.holdsBack("web", k); got != want {
			t.Errorf("slot %d held back: %v, want %v", k, got, want)
		}
	}
	d.State.Promoted = true
	if d.holdsBack("web", 2) {
		t.Error("held back after promotion")
	}
	d.State.Status = DeployFailed
	if !d.holdsBack("web", 0) {
		t.Error("a failed deployment moves slots on")
	}
}

// TestDeploymentTransitions on a real Consul: a deploy starts a running
// state, a second deploy is refused while it runs and supersedes it with
// -force; success marks the spec stable; a failure with auto_revert makes
// a copy of the stable spec desired, running, with no canary phase, in the
// same transaction as the failure and its records; promote ends a canary
// phase once, and is refused without one.
func TestDeploymentTransitions(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	if _, err := Deploy(c, depSpec(0, "v1", 3, 1, false), DeployOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	d, err := ReadDeployment(c, "shop")
	if err != nil || d.State == nil || d.State.Status != DeployRunning || !d.State.Promoted || d.State.Canaries != nil {
		t.Fatalf("first deploy: %+v %v", d, err)
	}
	if _, err := Deploy(c, depSpec(0, "v2", 3, 1, false), DeployOptions{By: "test"}); !errors.Is(err, ErrInProgress) {
		t.Fatalf("deploy over a running one: %v", err)
	}
	if ok, err := succeed(c, d, "n1", time.Now().UTC()); !ok || err != nil {
		t.Fatalf("succeed: %v %v", ok, err)
	}
	if ok, _ := succeed(c, d, "n2", time.Now().UTC()); ok {
		t.Fatal("a second succeed on a stale state index won")
	}
	res, err := Deploy(c, depSpec(0, "v2", 3, 1, false), DeployOptions{By: "test"})
	if err != nil || res.N != 2 || res.Canaries["web"] != 1 {
		t.Fatalf("deploy v2: %+v %v", res, err)
	}
	if _, err := Promote(c, "shop", "op"); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if _, err := Promote(c, "shop", "op"); !errors.Is(err, ErrNoCanaries) {
		t.Fatalf("second promote: %v", err)
	}
	d, _ = ReadDeployment(c, "shop")
	if d.Stable == nil || d.Stable.N != 1 || d.stableSpec == nil || !d.State.Promoted {
		t.Fatalf("before the failure: %+v", d)
	}
	if ok, err := fail(c, d, "web", "web/0: not healthy", "n1", time.Now().UTC(), nil); !ok || err != nil {
		t.Fatalf("fail: %v %v", ok, err)
	}
	d3, err := ReadDeployment(c, "shop")
	if err != nil || d3.Spec.N != 3 || d3.Spec.Hash != depSpec(0, "v1", 3, 1, false).Hash || d3.Spec.By != "auto-revert" ||
		d3.State.Status != DeployRunning || d3.State.RevertOf != 2 || !d3.State.Promoted || len(d3.State.Canaries) != 0 {
		t.Fatalf("after the failure: spec %+v state %+v %v", d3.Spec, d3.State, err)
	}
	if runHash(d3.Spec.Units()[0]) != runHash(depSpec(0, "v1", 3, 1, false).Units()[0]) {
		t.Fatal("the revert does not run what the stable spec runs")
	}
	st2, _ := ReadDeployState(c, "shop", 2)
	if st2 == nil || st2.Status != DeployFailed || st2.RevertedTo != 3 || !strings.Contains(st2.Reason, "not healthy") {
		t.Fatalf("state 2: %+v", st2)
	}
	var events []AuditEvent
	pairs, _, _ := c.KV().List(AuditPrefix, nil)
	for _, p := range pairs {
		var e AuditEvent
		_ = json.Unmarshal(p.Value, &e)
		events = append(events, e)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].At.Before(events[j].At) })
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action)
	}
	if got := strings.Join(actions, ","); got != "deploy,deploy-successful,deploy,deploy-promote,deploy-failed,deploy-revert" {
		t.Fatalf("audit: %s", got)
	}
	// -force supersedes the running revert.
	res, err = Deploy(c, depSpec(0, "v4", 3, 1, false), DeployOptions{By: "test", Force: true})
	if err != nil || res.N != 4 || res.Superseded != 3 {
		t.Fatalf("-force: %+v %v", res, err)
	}
	if st3, _ := ReadDeployState(c, "shop", 3); st3 == nil || st3.Status != DeployCancelled {
		t.Fatalf("state 3 after -force: %+v", st3)
	}
	// Failing a deployment without auto_revert, or with no stable spec to
	// go back to, only marks it failed.
	d, _ = ReadDeployment(c, "shop")
	d.Spec.Services[0].Placement.Update.AutoRevert = false
	if ok, err := fail(c, d, "web", "x", "n1", time.Now().UTC(), nil); !ok || err != nil {
		t.Fatalf("fail without auto_revert: %v %v", ok, err)
	}
	if d5, _ := ReadDeployment(c, "shop"); d5.Spec.N != 4 || d5.State.Status != DeployFailed || d5.State.RevertedTo != 0 {
		t.Fatalf("after a failure without auto_revert: %+v %+v", d5.Spec, d5.State)
	}
}
