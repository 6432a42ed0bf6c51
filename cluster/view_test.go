package cluster

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// viewOf is the one builder of a unit's placement view, for the nodes'
// claims, the drain check and status/why alike: Load and Reserved count
// every unit's held slots, Holders and Previous only the unit's, and a
// corrupt slot is nobody's.
func TestViewOf(t *testing.T) {
	pen := map[string]time.Time{"n3": time.Unix(100, 0)}
	slots := map[string]map[int]slotKV{
		"api": {
			0: {value: SlotValue{Node: "n1", State: SlotHeld}, session: "s1"},
			1: {value: SlotValue{Node: "n2", State: SlotReleased}},
			2: {value: SlotValue{Node: "n2", State: SlotHeld}, session: "s2", corrupt: errors.New("bad")},
			3: {value: SlotValue{Node: "n3", State: SlotFailed}},
		},
		"db": {
			0: {value: SlotValue{Node: "n1", State: SlotHeld}, session: "s1"},
			1: {value: SlotValue{Node: "n4", State: SlotReleased}},
		},
	}
	units := map[string]UnitSpec{
		"api": {Unit: placement.Unit{Name: "api", Resources: placement.Reservation{CPU: 100}}},
		"db":  {Unit: placement.Unit{Name: "db", Resources: placement.Reservation{Memory: 256}}},
	}
	nodes := []placement.NodeInfo{{Name: "n1"}, {Name: "n2"}}
	v := viewOf("api", nodes, slots, units, pen)
	want := placement.View{
		Nodes:     nodes,
		Holders:   map[int]string{0: "n1"},
		Previous:  map[int]string{1: "n2"},
		Penalties: pen,
		Load:      map[string]int{"n1": 2, "n2": 1},
		Reserved:  map[string]placement.Reservation{"n1": {CPU: 100, Memory: 256}, "n2": {CPU: 100}},
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("viewOf(api) =\n%+v\nwant\n%+v", v, want)
	}
	// status/why read the same view the nodes rank with.
	st := &State{Nodes: nodes, Units: units, Penalties: map[string]map[string]time.Time{"api": pen}, Slots: map[string]map[int]SlotState{}}
	for u, ks := range slots {
		st.Slots[u] = map[int]SlotState{}
		for k, s := range ks {
			ss := SlotState{Value: s.value, Session: s.session}
			if s.corrupt != nil {
				ss.Corrupt = s.corrupt.Error()
			}
			st.Slots[u][k] = ss
		}
	}
	if got := st.View("api"); !reflect.DeepEqual(got, want) {
		t.Errorf("State.View(api) =\n%+v\nwant\n%+v", got, want)
	}
}
