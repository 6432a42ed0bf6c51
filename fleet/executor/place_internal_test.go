package executor

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// A free slot's previous holder is the node its value names; a held, failed
// or unreadable slot has none.
func TestPreviousOf(t *testing.T) {
	val := func(node, state string) []byte { return slotValue(node, state, "", time.Unix(1000, 0)) }
	pairs := api.KVPairs{
		{Key: "mariposa/slots/db/0", Value: val("n1", cluster.SlotReleased)},
		{Key: "mariposa/slots/db/1", Value: val("n2", cluster.SlotHeld)}, // lost with its session
		{Key: "mariposa/slots/db/2", Value: val("n3", cluster.SlotHeld), Session: "s"},
		{Key: "mariposa/slots/db/3", Value: val("n4", cluster.SlotFailed)},
		{Key: "mariposa/slots/db/4", Value: []byte("{")},
		{Key: "mariposa/slots/db/x", Value: val("n5", cluster.SlotReleased)},
	}
	got := previousOf("mariposa/slots/db/", pairs)
	if want := map[int]string{0: "n1", 1: "n2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("previousOf: %v, want %v", got, want)
	}
}

// The members' catalog entries carry what placement reads of a node: its
// meta and datacenter, and from the registration's meta its version,
// eligibility, drain and capacity; a node with two entries counts the one
// that runs the fleet.
func TestNodeInfos(t *testing.T) {
	capa := placement.CapacityMeta(placement.Capacity{Total: placement.Reservation{CPU: 2000, Memory: 512}})
	capa["fleet"] = "true"
	capa["version"] = "1.2.3"
	got := nodeInfos([]*api.CatalogService{
		{Node: "a", Datacenter: "dc1", NodeMeta: map[string]string{"zone": "z1"}, ServiceMeta: capa},
		{Node: "b", ServiceMeta: map[string]string{"eligible": "false"}},
		{Node: "b", ServiceMeta: map[string]string{"fleet": "true", "draining": "true"}},
		{Node: "b", ServiceMeta: map[string]string{}},
	})
	want := map[string]placement.NodeInfo{
		"a": {Name: "a", Datacenter: "dc1", Meta: map[string]string{"zone": "z1"}, MariposaVersion: "1.2.3", Fleet: true, Eligible: true,
			Capacity: &placement.Capacity{Total: placement.Reservation{CPU: 2000, Memory: 512}}},
		"b": {Name: "b", Fleet: true, Eligible: true, Draining: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("nodeInfos:\n%+v\nwant\n%+v", got, want)
	}
}
