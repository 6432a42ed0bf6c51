package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
)

// JudgeUnit's decisions on a failed slot and on progress_deadline
// (CLUSTER.md section 5): a slot failed for good since the
// deployment started fails it (reverted with auto_revert); no instance
// newly healthy at the version for progress_deadline plus ProgressSkew
// fails it; otherwise the judge asks to look again after the deadline.
func TestJudgeFailedSlotAndProgressDeadline(t *testing.T) {
	withPD := func(d *Deployment, pd time.Duration) *Deployment { d.Update.ProgressDeadline = pd; return d }
	noRevert := running(2, "v1", "v2")
	noRevert.Update.AutoRevert = false
	mark := func(at time.Time) map[int]cluster.FailedRecord {
		return map[int]cluster.FailedRecord{1: {Node: "n2", Reason: "restarts exhausted", At: at}}
	}
	hAt := func(ver string, at time.Time) Status {
		return Status{HoldStatus: cluster.HoldStatus{Version: ver, HealthyAt: &at}}
	}
	pd := time.Minute
	withCount := func(d *Deployment, n int) *Deployment { d.Count = n; return d }
	revertOf := func(d *Deployment) *Deployment { d.From, d.RevertOf = "v2", 2; return d }
	for _, tc := range []struct {
		name   string
		d      *Deployment
		count  int
		status map[int]Status
		failed map[int]cluster.FailedRecord
		now    time.Time
		want   string // the decision; "" none
		reason string // in the failure's reason
		wake   time.Time
	}{
		{"failed slot, auto_revert: reverted", running(2, "v1", "v2"), 2, nil, mark(t0.Add(time.Second)), t0.Add(2 * time.Second),
			"deploy-revert", "slot web/1 failed: restarts exhausted", time.Time{}},
		{"failed slot, no auto_revert: failed", noRevert, 2, nil, mark(t0.Add(time.Second)), t0.Add(2 * time.Second),
			"deploy-failed", "slot web/1 failed: restarts exhausted", time.Time{}},
		{"failed before the deployment started: not its failure", running(2, "v1", "v2"), 2, nil, mark(t0.Add(-time.Second)), t0.Add(2 * time.Second),
			"", "", time.Time{}},
		{"a revert is not failed by a failed slot", revertOf(running(3, "v1", "v1")), 2, nil, mark(t0.Add(time.Second)), t0.Add(2 * time.Second),
			"", "", time.Time{}},
		{"failed mark beyond count: not the unit's", running(2, "v1", "v2"), 1, nil, mark(t0.Add(time.Second)), t0.Add(2 * time.Second),
			"", "", time.Time{}},
		{"within progress_deadline: wait, look again after it", withPD(noRevert, pd), 3, map[int]Status{0: hAt("v2", t0.Add(10*time.Second))}, nil,
			t0.Add(70 * time.Second), "", "", t0.Add(10*time.Second + pd + ProgressSkew + time.Millisecond)},
		{"within the skew margin: wait", withPD(running(2, "v1", "v2"), pd), 2, nil, nil, t0.Add(pd + ProgressSkew),
			"", "", t0.Add(pd + ProgressSkew + time.Millisecond)},
		{"no progress past progress_deadline: failed", withPD(running(2, "v1", "v2"), pd), 3, map[int]Status{0: hAt("v2", t0.Add(time.Second)), 1: hAt("v1", t0.Add(time.Hour))}, nil,
			t0.Add(time.Second + pd + ProgressSkew + time.Millisecond), "deploy-revert", "no progress within progress_deadline (1m0s): 1 of 3 instances of web healthy", time.Time{}},
		{"every instance healthy: successful, deadline or not", withPD(running(2, "v1", "v2"), pd), 1, map[int]Status{0: hAt("v2", t0)}, nil,
			t0.Add(time.Hour), "deploy-successful", "", time.Time{}},
		{"the record's count, not the node's older one: a scale-up waits", withCount(running(2, "v1", "v2"), 3), 2,
			map[int]Status{0: hAt("v2", t0), 1: hAt("v2", t0)}, nil, t0.Add(time.Second), "", "", time.Time{}},
		{"the record's count after a scale-down: successful", withCount(running(2, "v1", "v2"), 2), 3,
			map[int]Status{0: hAt("v2", t0), 1: hAt("v2", t0)}, nil, t0.Add(time.Second), "deploy-successful", "", time.Time{}},
		{"no progress_deadline: waits for ever", running(2, "v1", "v2"), 2, nil, nil, t0.Add(time.Hour), "", "", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := *tc.d
			next, what, wake := JudgeUnit(&d, JudgeInput{Unit: "web", Count: tc.count, Status: tc.status, Failed: tc.failed, Now: tc.now, Revert: true})
			if what != tc.want || (next == nil) != (tc.want == "") {
				t.Fatalf("decision %q (%+v), want %q", what, next, tc.want)
			}
			if !wake.Equal(tc.wake) {
				t.Errorf("wake %v, want %v", wake, tc.wake)
			}
			if tc.reason == "" {
				return
			}
			reason := next.Reason
			if next.Ended != nil {
				reason = next.Ended.Reason
				if next.Version != "v1" || next.RevertOf != 2 || next.Ended.Status != cluster.DeployFailed {
					t.Errorf("revert %+v %+v", next, next.Ended)
				}
			} else if next.Status != cluster.DeployFailed {
				t.Errorf("status %q", next.Status)
			}
			if reason != tc.reason {
				t.Errorf("reason %q, want %q", reason, tc.reason)
			}
		})
	}
}

// The judge (slot 0's holder) fails the running deployment when control/
// shows a slot of the unit failed since it started, in one MoveDeployment
// (the record and its audit in one transaction); the node that failed a
// slot does too when it holds no slot 0 (a unit of count 1 has no other
// judge); any other node does not.
func TestFailedSlotFailsTheDeployment(t *testing.T) {
	d := running(2, "v1", "v2")
	d.Update.AutoRevert = false
	ctl := func(node string) ControlAnswer {
		return ctlView(30, cluster.Control{Failed: map[string]cluster.FailedRecord{
			"web/1": {Node: node, Reason: "restarts exhausted", At: t0.Add(time.Second)}}})
	}
	for _, tc := range []struct {
		name  string
		held  []int
		count int
		by    string // the node that failed the slot
		judge bool
	}{
		{"slot 0's holder judges", []int{0}, 2, "n2", true},
		{"the failing node judges its own failure", []int{2}, 3, "me", true},
		{"another node does not", []int{2}, 3, "n2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := holder(t, tc.count, tc.held...)
			m.a.cfg.Control = true
			m.now = t0.Add(2 * time.Second)
			m.step(ctl(tc.by))
			acts := m.step(deployView(10, d, nil, nil))
			mv, ok := find[MoveDeployment](acts)
			if ok != tc.judge {
				t.Fatalf("moved %v, want %v: %v", ok, tc.judge, acts)
			}
			if !ok {
				return
			}
			if mv.CAS != 9 || mv.Next.Status != cluster.DeployFailed || mv.Audit.Action != "deploy-failed" ||
				!strings.Contains(mv.Next.Reason, "slot web/1 failed: restarts exhausted") || !strings.Contains(mv.Audit.Reason, "slot web/1 failed") {
				t.Fatalf("move %+v", mv)
			}
		})
	}
}

// progress_deadline on the agent: slot 0's holder asks for a wake after
// the deadline (nothing else moves when no node can hold a slot), and
// fails the deployment then.
func TestProgressDeadlineFailsTheDeployment(t *testing.T) {
	d := running(2, "v1", "v2")
	d.Update.AutoRevert, d.Update.ProgressDeadline = false, time.Minute
	m := holder(t, 3, 0)
	by := t0.Add(time.Minute + ProgressSkew)
	// Slot 0 healthy at v2 from t0; slots 1 and 2 nobody can hold.
	acts := m.step(deployView(10, d, map[int]Status{0: healthyAt("v2", 40)}, nil))
	if len(all[MoveDeployment](acts)) > 0 {
		t.Fatalf("judged before the deadline: %v", acts)
	}
	w, ok := find[Wake](acts)
	if !ok || w.At.After(by.Add(time.Second)) {
		t.Fatalf("no wake by the deadline (%v): %v", by, acts)
	}
	for m.now.Before(by) || m.now.Equal(by) {
		m.now = w.At
		acts = m.step(Tick{})
		if m.now.After(by) {
			break
		}
		if len(all[MoveDeployment](acts)) > 0 {
			t.Fatalf("judged at %v, before %v: %v", m.now, by, acts)
		}
		if w, ok = find[Wake](acts); !ok {
			t.Fatalf("no wake at %v: %v", m.now, acts)
		}
	}
	mv, ok := find[MoveDeployment](acts)
	if !ok || mv.Next.Status != cluster.DeployFailed || !strings.Contains(mv.Next.Reason, "progress_deadline (1m0s): 1 of 3 instances of web healthy") {
		t.Fatalf("not failed after the deadline: %+v %v", mv, acts)
	}
}

// The judge's progress outlives the status that said it: a slot healthy
// at the deployment's version whose status is gone since (its hold ended:
// a scale-down, a drain, its node lost) still counts as progress, for the
// judge that saw it (the simulator: a revert failed on progress_deadline
// 3 s after a slot became healthy at it, the slot released since;
// go run ./fleet/sim/cmd/sim -nodes 50 -units 10 -slots 10 -seeds 1 -seed 29 -deploys -ops -volumes -placement).
// Mutation-checked: without the judge's memory (JudgeInput.Progress), the
// first row fails the deployment.
func TestProgressOutlivesItsStatus(t *testing.T) {
	pd := time.Minute
	healthy := t0.Add(30 * time.Second)
	for _, tc := range []struct {
		name string
		at   time.Time
		fail bool
	}{
		{"past the deadline from the start, not from the last progress", t0.Add(pd + ProgressSkew + time.Second), false},
		{"past the deadline from the last progress", healthy.Add(pd + ProgressSkew + time.Second), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := running(2, "v1", "v2")
			d.Update.AutoRevert, d.Update.ProgressDeadline = false, pd
			m := holder(t, 3, 0)
			m.now = t0.Add(time.Second)
			m.step(deployView(10, d, nil, nil))
			m.now = healthy.Add(time.Second)
			at := healthy
			m.step(deployView(11, d, map[int]Status{1: {HoldStatus: cluster.HoldStatus{Index: 99, Version: "v2", HealthyAt: &at}}}, nil))
			m.now = healthy.Add(2 * time.Second)
			m.step(deployView(12, d, nil, nil)) // slot 1's hold ended
			m.now = tc.at
			acts := m.step(Tick{})
			mv, moved := find[MoveDeployment](acts)
			if moved != tc.fail || (moved && mv.Next.Status != cluster.DeployFailed) {
				t.Fatalf("at %v: moved %v (%+v), want failed %v", tc.at.Sub(t0), moved, mv.Next, tc.fail)
			}
		})
	}
}
