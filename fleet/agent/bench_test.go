package agent

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// The 1,000-node fleet of the simulator's figures: 100 units of 100
// slots, one node's agent.
const benchNodes, benchUnits, benchSlots = 1000, 100, 100

func benchFleet() (nodes *NodesView, units []Unit, held map[SlotID]uint64) {
	nodes = &NodesView{Index: 1}
	for i := range benchNodes {
		nodes.Nodes = append(nodes.Nodes, fmt.Sprintf("n%04d", i))
	}
	held = map[SlotID]uint64{}
	for u := range benchUnits {
		units = append(units, Unit{Name: fmt.Sprintf("u%03d", u), Count: benchSlots, MaxPerNode: 1, Exclusive: u%2 == 0})
		for k := range benchSlots {
			if (u*benchSlots+k)%benchNodes == 0 {
				held[SlotID{units[u].Name, k}] = 5
			}
		}
	}
	return nodes, units, held
}

// unitIndex is a unit's index as a node reads it: every slot held by
// the placed fleet's node, but the first free ones.
func unitIndex(u Unit, ui int, idx uint64, free int) *SlotsView {
	var keys []string
	for k := range u.Count {
		if k < free {
			continue
		}
		keys = append(keys, SlotID{u.Name, k}.IndexKey(fmt.Sprintf("n%04d", (ui*u.Count+k)%benchNodes)))
	}
	return IndexView(u.Name, idx, keys)
}

func benchAgent() (*Agent, []Unit) {
	nodes, units, held := benchFleet()
	exclusive := map[string]bool{}
	for _, u := range units {
		exclusive[u.Name] = u.Exclusive
	}
	a := New(Config{Node: "n0500", Seed: 1, Warm: &Warm{Session: "s", At: t0, Held: held, Exclusive: exclusive}})
	a.Step(t0, UnitsAnswer{Units: units})
	a.Step(t0, NodesAnswer{View: nodes})
	for i, u := range units {
		a.Step(t0, SlotsAnswer{View: unitIndex(u, i, 10, 0)})
	}
	return a, units
}

// BenchmarkStepSlotChange is one node's step for one answer of a unit's
// index that shows a vacancy: the unit ranked anew over 1,000 nodes
// (placement.Assign, not shared: each real node ranks for itself).
func BenchmarkStepSlotChange(b *testing.B) {
	a, units := benchAgent()
	idx := uint64(100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		idx++
		a.Step(t0, SlotsAnswer{View: unitIndex(units[i%len(units)], i%len(units), idx, 1+i%3)})
	}
}

// BenchmarkStepFullCount is one node's step for an answer of a unit at
// full count (a claim elsewhere filled the last vacancy).
func BenchmarkStepFullCount(b *testing.B) {
	a, units := benchAgent()
	views := make([]*SlotsView, len(units))
	for i, u := range units {
		views[i] = unitIndex(u, i, 200, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		a.Step(t0, SlotsAnswer{View: views[i%len(views)]})
	}
}

// TestAgentMemory reports the heap one node's agent holds at 1,000 nodes
// and 10,000 slots, its views of the 100 units' indexes included (a real
// node holds its own; the simulator shares them).
func TestAgentMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a, _ := benchAgent()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(a)
	kb := float64(after.HeapAlloc-before.HeapAlloc) / 1024
	t.Logf("one node's agent at %d nodes, %d units x %d slots: %.0f KB", benchNodes, benchUnits, benchSlots, kb)
	if kb > 64*1024 {
		t.Errorf("one agent holds %.0f KB", kb)
	}
	_ = time.Second
}
