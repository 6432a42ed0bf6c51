package agent

import (
	"github.com/mariposa-sh/mariposa/cluster"

	"testing"
)

// Where each record the agent emits is written (AuditPlace): a table of
// steps as the agent returns them. Mutation check: AuditPlace without
// its Deferred case writes the scale-down's record alone (and again with
// the release: two records of one decision); without its Release case a
// stray's release record goes alone, outside the release's transaction.
func TestAuditPlace(t *testing.T) {
	db := SlotID{"db", 1}
	other := SlotID{"db", 0}
	for _, tc := range []struct {
		name string
		acts []any
		rec  int // the record's index in acts
		want Where
		at   int // Riding: the carrier's index
	}{
		{"claim: its claim", []any{Claim{Slot: other}, Claim{Slot: db}, Record{Slot: db, Action: "claim", Reason: "rank 1"}}, 2, Riding, 1},
		{"fail: the release's", []any{Release{Slot: db}, Record{Slot: db, Action: "fail"}}, 1, Written, -1},
		{"storm-brake: the brake's", []any{WriteBrake{}, Record{Slot: SlotID{K: -1}, Action: "storm-brake"}}, 1, Written, -1},
		{"restore: the acknowledgement's", []any{Record{Slot: db, Action: "restore"}, Start{Slot: db}}, 0, Written, -1},
		{"lost: not this node's decision, logged", []any{Stop{Slot: db, Kill: true}, Record{Slot: db, Action: "lost"}}, 1, Logged, -1},
		{"scaled down: the coming release", []any{Stop{Slot: db}, Record{Slot: db, Action: "release", Reason: "scaled down", Deferred: true}}, 1, Deferred, -1},
		{"stray: its release", []any{Release{Slot: other}, Release{Slot: db}, Record{Slot: db, Action: "release", Reason: "stray"}}, 2, Riding, 1},
		{"drain of a shared slot: its release", []any{Release{Slot: db}, Record{Slot: db, Action: "release", Reason: "drained from n1"}}, 1, Riding, 0},
		{"orphan stopped by the drain: its release said so", []any{Stop{Slot: db}, Record{Slot: db, Action: "orphan-stop", Reason: "the old instance stops"}}, 1, Logged, -1},
		{"takeover: its claim's record", []any{Claim{Slot: other}, Claim{Slot: db}, Record{Slot: db, Action: "claim", Reason: "rank 0; takeover from a lost node"}}, 2, Riding, 1},
		{"rollout-failed: its status", []any{Publish{Slot: db, Audit: Record{Slot: db, Action: "rollout-failed"}}}, -1, Written, -1},
		{"a claim held back: its cause is recorded", []any{Record{Slot: db, Action: "hold"}}, 0, Logged, -1},
		{"an update held back beside the queue: still its cause's", []any{Record{Slot: db, Action: "hold"}, PublishIntents{}}, 0, Logged, -1},
		{"a release's own record", []any{Record{Slot: db, Action: "release", Reason: "released; no handoff of its data: refused"}, Release{Slot: db}}, 0, Riding, 1},
		{"drain-status: a report, logged", []any{PublishDrain{}, Record{Action: "drain-status"}}, 1, Logged, -1},
		{"queue: a report, logged", []any{Record{Action: "queue"}, PublishIntents{}}, 0, Logged, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rec < 0 {
				// Carried by its action (Publish.Audit, MoveDeployment.Audit),
				// never a Record of the step.
				if riding, alone := Audits(tc.acts); len(riding)+len(alone) != 0 {
					t.Fatalf("Audits = %v, %v", riding, alone)
				}
				return
			}
			w, at := AuditPlace(tc.acts, tc.acts[tc.rec].(Record))
			if w != tc.want || at != tc.at {
				t.Fatalf("AuditPlace = %v, %d; want %v, %d", w, at, tc.want, tc.at)
			}
			riding, alone := Audits(tc.acts)
			n := len(alone)
			for _, rs := range riding {
				n += len(rs)
			}
			want := 0
			if tc.want == Riding || tc.want == Alone {
				want = 1
			}
			if n != want || (tc.want == Riding && len(riding[tc.at]) != 1) {
				t.Fatalf("Audits = %v, %v", riding, alone)
			}
		})
	}
}

// A slot scaled down is stopped with its decision's record, which the
// release carries once the instance has exited (one record of the
// decision, in the release's transaction). Mutation check: without
// held.then's keeping of the record, the Release carries none.
func TestScaledDownReleaseCarriesItsRecord(t *testing.T) {
	db := SlotID{"db", 1}
	a := New(Config{Node: "me", Seed: 1, Warm: &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{db: 40}}})
	a.Step(t0, UnitsAnswer{Units: []Unit{{Name: "db", Count: 2, MaxPerNode: 1}}})
	a.Step(t0, NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me", "x"}}})
	a.Step(t0, slots("db", 41, Slot{K: 0, Node: "x", ModifyIndex: 41}, Slot{K: 1, Node: "me", ModifyIndex: 41}))
	acts := a.Step(t0, UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, MaxPerNode: 1}}})
	if _, ok := find[Stop](acts); !ok {
		t.Fatalf("no stop: %v", acts)
	}
	if riding, alone := Audits(acts); len(riding) != 0 || len(alone) != 0 {
		t.Fatalf("the stop's record written now: %v %v", riding, alone)
	}
	r, ok := find[Release](a.Step(t0, InstanceExited{Slot: db}))
	if !ok || r.Audit.Action != "release" || r.Audit.Reason != "count is 1" || r.Audit.Slot != db {
		t.Fatalf("release %+v %v, want its record", r, ok)
	}
}

// The reason of a hold given up because its unit no longer has the slot,
// in website/operations.md's words (its release row), and what
// its handoff did, said in the same release's record. Mutation check:
// scaledDown without its Stopping case says "unit removed" for a node
// that stops; without handedOff the release says nothing of its handoff.
func TestReleaseReasonsAsCluster(t *testing.T) {
	db := SlotID{"db", 1}
	for _, tc := range []struct {
		name string
		next UnitsAnswer
		done *HandoffDone // the unit has volumes: its handoff's answer
		want string
	}{
		{"count lowered", UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, MaxPerNode: 1}}}, nil, "count is 1"},
		{"unit removed", UnitsAnswer{}, nil, "unit removed"},
		{"mariposa stopped", UnitsAnswer{Stopping: true}, nil, "mariposa stopped"},
		{"handed off", UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, MaxPerNode: 1, Volumes: true}}},
			&HandoffDone{Slot: db, OK: true, Note: "handed off 1 volume"}, "count is 1; handed off 1 volume"},
		{"no handoff", UnitsAnswer{Units: []Unit{{Name: "db", Count: 1, MaxPerNode: 1, Volumes: true}}},
			&HandoffDone{Slot: db, GiveUp: true, Note: "refused"}, "count is 1; no handoff of its data: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Unit{Name: "db", Count: 2, MaxPerNode: 1, Volumes: tc.done != nil}
			a := New(Config{Node: "me", Seed: 1, Warm: &Warm{Session: "s-me", At: t0, Held: map[SlotID]uint64{db: 40}}})
			a.Step(t0, UnitsAnswer{Units: []Unit{u}})
			a.Step(t0, NodesAnswer{View: &NodesView{Index: 1, Nodes: []string{"me", "x"}}})
			a.Step(t0, slots("db", 41, Slot{K: 0, Node: "x", ModifyIndex: 41}, Slot{K: 1, Node: "me", ModifyIndex: 41}))
			a.Step(t0, tc.next)
			acts := a.Step(t0, InstanceExited{Slot: db})
			if tc.done != nil {
				if _, ok := find[PushHandoff](acts); !ok {
					t.Fatalf("no handoff: %v", acts)
				}
				acts = a.Step(t0, *tc.done)
			}
			r, ok := find[Release](acts)
			if !ok || r.Audit.Action != "release" || r.Audit.Reason != tc.want {
				t.Fatalf("release %+v %v, want its record saying %q", r, ok, tc.want)
			}
		})
	}
}

// The judge's records in website/operations.md's shape:
// the deployment as the service, the unit as the slot, to its spec number;
// a revert is deploy-failed then deploy-revert (failed spec -> the stable
// one) in the move's transaction. Mutation check: moveRecords returning
// the revert alone (no deploy-failed) fails the revert's row.
func TestMoveRecordsAsCluster(t *testing.T) {
	cur := &Deployment{N: 2, Version: "app/3", Stable: "app/1", Spec: "app/3"}
	for _, tc := range []struct {
		what       string
		next       *Deployment
		want, also Record
	}{
		{"deploy-successful", &Deployment{N: 2, Version: "app/3"},
			Record{Slot: SlotID{"web", -1}, Action: "deploy-successful", To: "3", Reason: "why", Deployment: "app"}, Record{}},
		{"deploy-promote", &Deployment{N: 2, Version: "app/3", Promoted: true},
			Record{Slot: SlotID{"web", -1}, Action: "deploy-promote", To: "3", Reason: "why", Deployment: "app"}, Record{}},
		{"deploy-failed", &Deployment{N: 2, Version: "app/3"},
			Record{Slot: SlotID{"web", -1}, Action: "deploy-failed", To: "3", Reason: "why", Deployment: "app"}, Record{}},
		{"deploy-revert", &Deployment{N: 3, Version: "app/1", RevertOf: 2, Ended: &cluster.RecordOutcome{N: 2, Reason: "slot 0: not healthy"}},
			Record{Slot: SlotID{"web", -1}, Action: "deploy-failed", To: "3", Reason: "slot 0: not healthy", Deployment: "app"},
			Record{Slot: SlotID{"web", -1}, Action: "deploy-revert", From: "3", To: "1", Reason: "auto_revert to stable spec 1 (app/1)", Deployment: "app"}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r, also := moveRecords("web", tc.what, cur, tc.next, "why")
			if r != tc.want || also != tc.also {
				t.Fatalf("moveRecords = %+v, %+v; want %+v, %+v", r, also, tc.want, tc.also)
			}
		})
	}
}
