package consultest

import (
	"context"
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
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
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
