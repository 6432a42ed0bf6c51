package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/lease"
	"github.com/mariposa-sh/mariposa/schema"
)

// Stats counts every slot of a unit once, by what the node last read, and
// says which it holds.
func TestStats(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	f := planFleet("n1", []string{"n1", "n2", "n3"}, map[int]slotKV{
		1: {value: SlotValue{Node: "n2", State: SlotHeld}, session: "s2"},
		2: {value: SlotValue{Node: "n3", State: SlotHeld}}, // no session: lost with n3
		3: {value: SlotValue{Node: "n2", State: SlotFailed, Reschedules: []RescheduleEvent{{Node: "n2", At: t0}}}},
		4: {corrupt: errors.New("bad")},
		5: {value: SlotValue{Node: "n2", State: SlotReleased}},
		// 6 and 7: no key at all
		9: {value: SlotValue{Node: "n2", State: SlotHeld}, session: "s2"}, // past the count
	})
	f.local = []UnitSpec{{Unit: Unit{Name: "api", Placement: &schema.Placement{Count: 8}}, Services: []*schema.Service{{Name: "api"}}}}
	f.held["api/0"] = &heldSlot{unit: f.local[0], k: 0, term: &lease.Term{Index: 42}, value: SlotValue{Node: "n1", State: SlotHeld, Takeover: true}}
	f.vacant["api/5"] = vacancy{since: t0}
	f.storm = &StormRecord{At: t0}
	f.remote["web"] = &Deployment{Spec: &Spec{Name: "web", N: 3}, State: &DeployState{N: 3, Status: DeployRunning}}
	f.remote["old"] = &Deployment{Spec: &Spec{Name: "old", N: 2}, State: &DeployState{N: 1, Status: DeploySuccessful}}

	f.pauses = map[string]PauseRecord{"": {Scope: PausePlacement}, "api": {Scope: PauseAll, Unit: "api"}}
	f.holding = []Intent{{}, {}}

	st := f.Stats()
	if !st.Ready || st.Node != "n1" || st.LiveNodes != 3 || !st.StormBrake {
		t.Fatalf("stats: %+v", st)
	}
	var api *UnitStats
	for i := range st.Units {
		if st.Units[i].Unit == "api" {
			api = &st.Units[i]
		}
	}
	if api == nil {
		t.Fatalf("no unit api in %+v", st.Units)
	}
	if api.Desired != 8 || api.Held != 2 || api.Free != 4 || api.Lost != 1 || api.Failed != 2 || len(api.Slots) != 8 {
		t.Errorf("api: desired %d held %d free %d lost %d failed %d slots %d; want 8 2 4 1 2 8",
			api.Desired, api.Held, api.Free, api.Lost, api.Failed, len(api.Slots))
	}
	want := []string{"held", "held", "lost", "failed", "corrupt", "free", "free", "free"}
	for k, s := range api.Slots {
		if s.State != want[k] || s.K != k {
			t.Errorf("slot %d: %s, want %s", k, s.State, want[k])
		}
	}
	if s := api.Slots[0]; !s.Mine || s.TermIndex != 42 || !s.Takeover || s.Node != "n1" {
		t.Errorf("held slot: %+v", s)
	}
	if s := api.Slots[1]; s.Mine || s.Node != "n2" {
		t.Errorf("another node's slot: %+v", s)
	}
	if !api.Slots[5].VacantSince.Equal(t0) || !api.Slots[6].VacantSince.IsZero() {
		t.Errorf("vacancies: %v, %v", api.Slots[5].VacantSince, api.Slots[6].VacantSince)
	}
	if len(api.Slots[3].Reschedules) != 1 {
		t.Errorf("reschedules: %+v", api.Slots[3].Reschedules)
	}
	if len(st.Deployments) != 2 || st.Deployments[0] != (DeploymentStats{Name: "old", N: 2, Status: DeployUnknown}) ||
		st.Deployments[1] != (DeploymentStats{Name: "web", N: 3, Status: DeployRunning}) {
		t.Errorf("deployments: %+v", st.Deployments)
	}
	if len(st.Pauses) != 2 || st.Pauses[0].Scope != PausePlacement || st.Pauses[1].Unit != "api" || st.HeldBack != 2 {
		t.Errorf("pauses: %+v, held back %d", st.Pauses, st.HeldBack)
	}
	// A copy: changing it changes nothing in the fleet.
	api.Slots[3].Reschedules[0].Node = "x"
	if f.slots["api"][3].value.Reschedules[0].Node != "n2" {
		t.Error("Stats shares the fleet's slices")
	}
}
