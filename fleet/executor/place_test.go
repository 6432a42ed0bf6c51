package executor_test

import (
	"cmp"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/agent"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// On real Consul, the executors place by CLUSTER.md section 4: a constraint
// on the node's meta keeps a unit off the nodes it excludes, and a node
// whose registration publishes too little capacity takes no slot that
// needs more (the attributes and the capacity come with the members'
// catalog answer).
func TestExecutorsPlaceByConstraintAndCapacity(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 4})
	zone := map[string]string{"node0": "z1", "node1": "z1", "node2": "z2", "node3": "z2"}
	for _, n := range f.nodes {
		meta := map[string]string{}
		if n.name == "node3" {
			meta = placement.CapacityMeta(placement.Capacity{Total: placement.Reservation{CPU: 100, Memory: 1024}})
		}
		_, err := f.c.Catalog().Register(&api.CatalogRegistration{Node: n.name, Address: "127.0.0.1", NodeMeta: map[string]string{"zone": zone[n.name]},
			Service: &api.AgentService{ID: "mariposa-" + n.name, Service: "mariposa", Meta: meta},
			Check:   &api.AgentCheck{Node: n.name, CheckID: n.check, Name: "mariposa supervisor", ServiceID: "mariposa-" + n.name, Status: api.HealthPassing}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	inZ2 := &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "${node.meta.zone}", Operator: "=", Value: "z2"}}}
	zoned := agent.Unit{Name: "zoned", Count: 2, MaxPerNode: 1, Placement: inZ2}
	sized := agent.Unit{Name: "sized", Count: 1, MaxPerNode: 1, Placement: inZ2, Resources: placement.Reservation{CPU: 500}}
	// The units come once the nodes' meta is in: the executors have
	// heard it with the members' next answer.
	waitMembersMeta(t, f)
	f.setUnits(zoned, sized)
	f.waitSettled(45 * time.Second)
	for _, u := range []agent.Unit{zoned, sized} {
		keys, err := f.slotKeys(u.Name)
		if err != nil {
			t.Fatal(err)
		}
		for k := range u.Count {
			holder, err := f.nodeOf(keys[k].Session)
			if err != nil {
				t.Fatal(err)
			}
			if zone[holder] != "z2" {
				t.Errorf("%s/%d held by %s, in zone %s: its constraint excludes it", u.Name, k, holder, zone[holder])
			}
			if u.Name == "sized" && holder == "node3" {
				t.Errorf("sized/%d held by node3, whose capacity (100 millicores) is less than the slot's 500", k)
			}
		}
	}
	f.checkNoOverlap()
}

// waitMembersMeta waits until the catalog answers every node's meta.
func waitMembersMeta(t *testing.T, f *fleet) {
	t.Helper()
	if !consultest.WaitFor(10*time.Second, func() bool {
		ss, _, err := f.c.Catalog().Service("mariposa", "", nil)
		if err != nil || len(ss) != len(f.nodes) {
			return false
		}
		for _, s := range ss {
			if s.NodeMeta["zone"] == "" {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the catalog never showed the nodes' meta")
	}
}

// hrwOrder is the nodes in HRW order for slot 0 of unit.
func hrwOrder(unit string, nodes []string) []string {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Compare(placement.HRW(unit, 0, b), placement.HRW(unit, 0, a))
	})
	return out
}

// On real Consul: a node under a reschedule penalty (penalty/<unit>/<node>)
// is not the one a free slot goes to, though HRW puts it first; a unit
// whose volumes keep data on the node goes back to the node its slot key
// names as its last holder, though HRW puts it last. Both are known
// before the first claim (the executor waits for them).
func TestExecutorsPlaceByPenaltyAndStickiness(t *testing.T) {
	names := []string{"node0", "node1", "node2"}
	penalized := hrwOrder("pen", names)[0]
	previous := hrwOrder("sticky", names)[2]
	f := newFleet(t, fleetOptions{nodes: 3, before: func(c *api.Client) {
		until, _ := json.Marshal(map[string]any{"until": time.Now().Add(time.Hour), "reason": "test"})
		last, _ := json.Marshal(cluster.SlotValue{Node: previous, State: cluster.SlotReleased, Since: time.Now().UTC()})
		for _, p := range []*api.KVPair{{Key: cluster.PenaltyKey("pen", penalized), Value: until}, {Key: agent.SlotID{Unit: "sticky", K: 0}.Key(), Value: last}} {
			if _, err := c.KV().Put(p, nil); err != nil {
				t.Fatal(err)
			}
		}
	}}, agent.Unit{Name: "pen", Count: 1, MaxPerNode: 1}, agent.Unit{Name: "sticky", Count: 1, MaxPerNode: 1, Sticky: true})
	f.waitSettled(45 * time.Second)
	for unit, check := range map[string]func(holder string) string{
		"pen": func(h string) string {
			if h == penalized {
				return "held by " + h + ", under a penalty"
			}
			return ""
		},
		"sticky": func(h string) string {
			if h != previous {
				return "held by " + h + ", not by its previous holder " + previous
			}
			return ""
		},
	} {
		keys, err := f.slotKeys(unit)
		if err != nil {
			t.Fatal(err)
		}
		holder, err := f.nodeOf(keys[0].Session)
		if err != nil {
			t.Fatal(err)
		}
		if why := check(holder); why != "" {
			t.Errorf("%s/0 %s", unit, why)
		}
	}
	f.checkNoOverlap()
}

// On real Consul: a unit whose constraint names a service
// (service.<name>) goes where that service runs, and one that excludes it
// goes elsewhere, though HRW puts the service's node first: the executor
// watches the services the units name, and their claims wait for the
// first answer. When the service moves, a new slot follows it.
func TestExecutorsPlaceByServices(t *testing.T) {
	names := []string{"node0", "node1", "node2"}
	dbNode := hrwOrder("cache", names)[2] // last for cache/0 by HRW alone
	apartFirst := hrwOrder("apart", names)[0]
	register := func(c *api.Client, node string) {
		t.Helper()
		_, err := c.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1",
			Service: &api.AgentService{ID: "db-" + node, Service: "db"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	with := &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "service.db", Operator: schema.OpIsSet}}}
	without := &schema.Placement{Constraints: []*schema.Constraint{{Attribute: "${service.db}", Operator: schema.OpIsNotSet}}}
	cache := agent.Unit{Name: "cache", Count: 1, MaxPerNode: 1, Placement: with}
	apart := agent.Unit{Name: "apart", Count: 1, MaxPerNode: 1, Placement: without}
	// db runs on apart's first node too, so that a ranking without the
	// services would put apart there.
	f := newFleet(t, fleetOptions{nodes: 3, before: func(c *api.Client) {
		register(c, dbNode)
		if apartFirst != dbNode {
			register(c, apartFirst)
		}
	}})
	dbOn := map[string]bool{dbNode: true, apartFirst: true}
	f.setUnits(cache, apart)
	f.waitSettled(45 * time.Second)
	holderOf := func(unit string, k int) string {
		t.Helper()
		keys, err := f.slotKeys(unit)
		if err != nil {
			t.Fatal(err)
		}
		h, err := f.nodeOf(keys[k].Session)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := holderOf("cache", 0); !dbOn[h] {
		t.Errorf("cache/0 held by %s, where db does not run (%v)", h, dbOn)
	}
	if h := holderOf("apart", 0); dbOn[h] {
		t.Errorf("apart/0 held by %s, where db runs", h)
	}
	// db moves to the node that has none: cache's new slot goes there.
	var moved string
	for _, n := range names {
		if !dbOn[n] {
			moved = n
		}
	}
	for n := range dbOn {
		if _, err := f.c.Catalog().Deregister(&api.CatalogDeregistration{Node: n, ServiceID: "db-" + n}, nil); err != nil {
			t.Fatal(err)
		}
	}
	register(f.c, moved)
	// Every node has placed by the move before the new slot (a user
	// deploys after the move, not within the watches' 100 ms pacing).
	_, meta, err := f.c.Catalog().Service("db", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !consultest.WaitFor(10*time.Second, func() bool {
		for _, n := range f.nodes {
			if n.ex.ServiceIndex("db") < meta.LastIndex {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the nodes did not see db move (catalog index %d) within 10s", meta.LastIndex)
	}
	cache.Count = 2
	f.setUnits(cache)
	f.waitSettled(45 * time.Second)
	if h := holderOf("cache", 1); h != moved {
		t.Errorf("cache/1 held by %s, not by %s where db runs now", h, moved)
	}
	f.checkNoOverlap()
}

// A new unit's first ranking is on the members as Consul has them when
// the node hears the unit, not as the members' watch last answered (it
// lags: no sooner than 100 ms after its last answer, later on a loaded
// node). Found by CI's TestStatefulWorkedExample: a node registered just
// before the deploy was missing from the others' views, and one of them
// ranked itself first for a slot whose affinity prefers the missing node.
// Here node0's members watch keeps its first answer (Faults.MembersStale);
// node1 (no executor: it claims nothing) registers after it, in the zone
// the unit prefers; node0 then hears the unit and must rank itself second
// ("rank 1"). Mutation check: with Faults.NoFreshRead it ranks itself
// first (the test fails).
func TestNewUnitRankedOnFreshMembers(t *testing.T) {
	for _, mutant := range []bool{false, true} {
		t.Run(map[bool]string{false: "fresh", true: "mutant"}[mutant], func(t *testing.T) {
			heard := make(chan struct{})
			var once sync.Once
			f := newFleet(t, fleetOptions{nodes: 1, faults: func(int) executor.Faults {
				return executor.Faults{MembersStale: true, NoFreshRead: mutant, Stepped: func(in any) {
					if a, ok := in.(agent.NodesAnswer); ok && slices.Equal(a.View.Nodes, []string{"node0"}) {
						once.Do(func() { close(heard) })
					}
				}}
			}})
			select {
			case <-heard:
			case <-time.After(30 * time.Second):
				t.Fatal("node0's members never answered")
			}
			_, err := f.c.Catalog().Register(&api.CatalogRegistration{Node: "node1", Address: "127.0.0.1", NodeMeta: map[string]string{"zone": "z1"},
				Service: &api.AgentService{ID: "mariposa-node1", Service: "mariposa"},
				Check:   &api.AgentCheck{Node: "node1", CheckID: "mariposa-node1:mariposa", Name: "mariposa supervisor", ServiceID: "mariposa-node1", Status: api.HealthPassing}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			prefer := &schema.Placement{Affinities: []*schema.Affinity{{Attribute: "node.meta.zone", Operator: schema.OpPrefer, Value: "z1", Weight: 100}}}
			f.setUnits(agent.Unit{Name: "cache", Count: 1, MaxPerNode: 1, Exclusive: true, Placement: prefer})
			var reason string
			if !consultest.WaitFor(30*time.Second, func() bool {
				for _, e := range f.auditOf("cache") {
					if e.Action == "claim" && e.Node == "node0" {
						reason = e.Reason
						return true
					}
				}
				return false
			}) {
				t.Fatal("node0 never claimed cache/0")
			}
			if ranked := reason == "rank 1"; ranked == mutant {
				t.Fatalf("node0 claimed cache/0 with %q: want rank 1 (node1, registered before the unit came, is preferred)%s", reason,
					map[bool]string{true: " (mutant: NoFreshRead; the test does not tell a stale view)"}[mutant])
			}
		})
	}
}
