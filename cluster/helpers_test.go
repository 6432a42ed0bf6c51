package cluster

import (
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
)

// The placement fixtures the tests here share with fleet/placement's.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// node returns a live, eligible node with meta from "k=v" pairs.
func node(name string, meta ...string) placement.NodeInfo {
	n := placement.NodeInfo{Name: name, Datacenter: "dc1", MariposaVersion: "1.4.2", Fleet: true, Live: true, Eligible: true,
		Meta: map[string]string{}, Services: map[string]int{}}
	for _, kv := range meta {
		k, v, _ := strings.Cut(kv, "=")
		n.Meta[k] = v
	}
	return n
}

// capNode is a live fleet node offering cpu millicores and mem MiB, with
// reserve r and node-local services reserving local.
func capNode(name string, cpu, mem int, reserve, local placement.Reservation) placement.NodeInfo {
	n := node(name)
	n.Capacity = &placement.Capacity{Total: placement.Reservation{CPU: cpu, Memory: mem}, Reserve: reserve, Local: local}
	return n
}
