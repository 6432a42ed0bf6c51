package command

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// The runner's handover gets each exclusive slot's deadline from the step
// machine's last confirmation (+ lock_delay/2); a non-exclusive slot, one
// without a process, or one the runner already bounds, keeps its own.
func TestConfirmByFromTheFleetsHandover(t *testing.T) {
	h := &executor.Handover{Session: "s", LockDelay: time.Second, Slots: []executor.HandedSlot{
		{Unit: "db", K: 0, Index: 7, Exclusive: true, Confirmed: 1000},
		{Unit: "web", K: 1, Index: 8, Confirmed: 2000},
	}}
	p := &proc.Handoff{Pid: 1}
	rh := &supervisor.Handover{Instances: []supervisor.InstanceHandoff{
		{Key: "db/0", Slot: "db/0", Proc: p},
		{Key: "web/1", Slot: "web/1", Proc: p},
		{Key: "db/0b", Slot: "db/0"},
		{Key: "other", Proc: p, ConfirmBy: 5},
	}}
	confirmBy(rh, h)
	want := []int64{1000 + int64(500*time.Millisecond), 0, 0, 5}
	for i, in := range rh.Instances {
		if in.ConfirmBy != want[i] {
			t.Errorf("%s: ConfirmBy %d, want %d", in.Key, in.ConfirmBy, want[i])
		}
	}
}

// The fleet's part travels in the upgrade state and back; a state
// without it (a node without -cluster, or an older build) reads as none.
func TestUpgradeStateCarriesTheFleet(t *testing.T) {
	h := &executor.Handover{Node: "n1", Session: "s1", TTL: 10 * time.Second, LockDelay: time.Second,
		Slots: []executor.HandedSlot{{Unit: "db", K: 0, Index: 42, Exclusive: true, Version: "v", Confirmed: 99}}}
	b, err := json.Marshal(upgradeState{Format: upgradeStateFormat, Version: upgradeStateVersion, From: "x", Runner: &supervisor.Handover{}, Fleet: h})
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeUpgradeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Fleet == nil || st.Fleet.Session != "s1" || len(st.Fleet.Slots) != 1 || st.Fleet.Slots[0] != h.Slots[0] {
		t.Fatalf("fleet part %+v", st.Fleet)
	}
	b, _ = json.Marshal(upgradeState{Format: upgradeStateFormat, Version: upgradeStateVersion, From: "x", Runner: &supervisor.Handover{}})
	if st, err := decodeUpgradeState(b); err != nil || st.Fleet != nil {
		t.Fatalf("without a fleet part: %+v %v", st, err)
	}
}

// adoptHeld hands the runner the holds' instances at once, with the same
// token and session, reported started (the agent has them running).
func TestAdoptHeldSeedsTheInstances(t *testing.T) {
	a := newAgentFleet(nil, nil)
	a.adoptHeld(&executor.Handover{Session: "s1", Slots: []executor.HandedSlot{{Unit: "db", K: 0, Index: 42, Exclusive: true, Version: "v"}, {Unit: "web", K: 1, Index: 43}}})
	db := a.held[agent.SlotID{Unit: "db", K: 0}]
	web := a.held[agent.SlotID{Unit: "web", K: 1}]
	if db == nil || db.start.Index != 42 || db.start.Session != "s1" || db.start.Version != "v" || !db.exclusive || db.lost == nil || !db.reported {
		t.Fatalf("db/0: %+v", db)
	}
	if web == nil || web.exclusive || web.lost != nil || web.start.Index != 43 {
		t.Fatalf("web/1: %+v", web)
	}
}
