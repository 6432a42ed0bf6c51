package cluster

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

func TestStateCapacity(t *testing.T) {
	st := &State{
		Units: map[string]UnitSpec{
			"api": {Unit: placement.Unit{Name: "api", Resources: placement.Reservation{CPU: 250, Memory: 256}}},
			"web": {Unit: placement.Unit{Name: "web"}},
		},
		Slots: map[string]map[int]SlotState{
			"api": {0: {Value: SlotValue{Node: "n1"}, Session: "s1"}, 1: {Value: SlotValue{Node: "n1"}, Session: "s1"},
				2: {Value: SlotValue{Node: "n2"}}}, // free: reserves nothing
			"web":   {0: {Value: SlotValue{Node: "n1"}, Session: "s1"}},
			"other": {0: {Value: SlotValue{Node: "n2"}, Session: "s2"}}, // not deployed: unknown
		},
		Nodes: []placement.NodeInfo{
			capNode("n2", 1000, 1024, placement.Reservation{}, placement.Reservation{}),
			capNode("n1", 2000, 2048, placement.Reservation{Memory: 512}, placement.Reservation{Memory: 100}),
			node("old"),
			{Name: "plain", Live: true},
		},
	}
	got := st.Capacity()
	want := []NodeCapacity{
		{Node: "n1", Live: true, Capacity: st.Nodes[1].Capacity, Slots: placement.Reservation{CPU: 500, Memory: 512}, Free: placement.Reservation{CPU: 1500, Memory: 924}},
		{Node: "n2", Live: true, Capacity: st.Nodes[0].Capacity, Free: placement.Reservation{CPU: 1000, Memory: 1024}},
		{Node: "old", Live: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	v := st.View("web")
	if v.Reserved["n1"] != (placement.Reservation{CPU: 500, Memory: 512}) || len(v.Reserved) != 1 {
		t.Errorf("view reserved: %+v", v.Reserved)
	}
}

// Why of a unit whose every slot is held ranks a vacancy of slot 0: its
// holder gets slot 0's reservation back, and a node short of room says so.
func TestWhyCapacity(t *testing.T) {
	u := placement.Unit{Name: "db", Placement: &schema.Placement{Count: 1, MaxPerNode: 1}, Resources: placement.Reservation{Memory: 512}}
	st := &State{
		Units: map[string]UnitSpec{"db": {Unit: u}},
		Slots: map[string]map[int]SlotState{"db": {0: {Value: SlotValue{Node: "n1"}, Session: "s1"}}},
		Nodes: []placement.NodeInfo{
			capNode("n1", 1000, 512, placement.Reservation{}, placement.Reservation{}),
			capNode("n2", 1000, 1024, placement.Reservation{}, placement.Reservation{Memory: 768}),
		},
	}
	out, err := st.Why("db", t0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "db/0: 1 of 2 nodes feasible") || !strings.Contains(out, "needs 512 MiB memory, 256 MiB free") {
		t.Errorf("why:\n%s", out)
	}
}

func TestLocalReservation(t *testing.T) {
	cfg := &schema.Config{Services: []*schema.Service{
		{Name: "a", Resources: &schema.Resources{CPU: 100, Memory: 64, MemoryMax: 1000}},
		{Name: "b"},
		{Name: "c", Resources: &schema.Resources{Memory: 32}},
		{Name: "slot", Resources: &schema.Resources{CPU: 999, Memory: 999}, Placement: &schema.Placement{Count: 1}},
	}}
	if got := placement.LocalReservation(cfg); got != (placement.Reservation{CPU: 100, Memory: 96}) {
		t.Errorf("local: %+v", got)
	}
	us := unitsOf(cfg.Services, nil)
	if len(us) != 1 || us[0].Unit.Resources != (placement.Reservation{CPU: 999, Memory: 999}) {
		t.Errorf("unit resources: %+v", us)
	}
	// A group's slot reserves what its members do together.
	gp := &schema.Placement{Count: 2}
	members := []*schema.Service{
		{Name: "app", Group: "shop", Placement: gp, Resources: &schema.Resources{CPU: 500, Memory: 256}},
		{Name: "sidecar", Group: "shop", Placement: gp, Resources: &schema.Resources{CPU: 100, Memory: 32}},
		{Name: "bare", Group: "shop", Placement: gp},
	}
	if us := unitsOf(members, nil); len(us) != 1 || us[0].Unit.Resources != (placement.Reservation{CPU: 600, Memory: 288}) {
		t.Errorf("group resources: %+v", us)
	}
}
