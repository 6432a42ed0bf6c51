package consultest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestDevAgent(t *testing.T) {
	a := NewDev(t)
	c := a.Client(t)
	self, err := c.Agent().NodeName()
	if err != nil || self != a.Name {
		t.Fatalf("node name %q, %v; want %q", self, err, a.Name)
	}
	// DNS answers for the consul service on the agent's own port.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := a.Resolver().LookupHost(ctx, "consul.service.consul")
	if err != nil || len(addrs) == 0 || addrs[0] != "127.0.0.1" {
		t.Fatalf("DNS consul.service.consul = %v, %v", addrs, err)
	}
	pid := a.PID()
	a.Kill()
	if pid == 0 || processAlive(pid) {
		t.Fatalf("agent pid %d still alive after Kill", pid)
	}
	// A restarted dev agent comes back on the same ports, empty.
	a.Start(t)
	if _, err := c.Agent().NodeName(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestCluster(t *testing.T) {
	SkipShort(t, "cluster test in -short mode")
	cl := NewCluster(t, 3, 2)
	c := cl.Clients[0].Client(t)
	nodes, _, err := c.Catalog().Nodes(nil)
	if err != nil || len(nodes) != 5 {
		t.Fatalf("catalog has %d nodes (%v), want 5", len(nodes), err)
	}
	peers, err := c.Status().Peers()
	if err != nil || len(peers) != 3 {
		t.Fatalf("raft peers %v (%v), want 3", peers, err)
	}
}

// Ports come from below the ephemeral range, and a port reserved by this
// process cannot be locked by another.
func TestFreePortsAcrossProcesses(t *testing.T) {
	lo, hi := portRange()
	ps := FreePorts(t, 20)
	seen := map[int]bool{}
	for _, p := range ps {
		if p < lo || p >= hi || seen[p] {
			t.Fatalf("port %d (range [%d, %d), seen %v)", p, lo, hi, seen[p])
		}
		seen[p] = true
	}
	requireFlock(t)
	for _, p := range ps {
		lock := filepath.Join(os.TempDir(), "mariposa-test-ports", strconv.Itoa(p))
		if err := exec.Command("flock", "-n", lock, "true").Run(); err == nil {
			t.Fatalf("port %d is not locked against other processes", p)
		}
	}
}

// requireFlock: flock(1) (util-linux) plays the other process that must
// find the locks taken; missing, the test is skipped here and fails in CI.
func requireFlock(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("flock")
	Require(t, err == nil, "no flock(1) to play the other process")
}
