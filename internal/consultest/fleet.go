package consultest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FleetOptions shape a fleet: Consul servers plus client agents, each
// client being one node of mariposa's fleet.
type FleetOptions struct {
	// Servers is the number of servers; default 3.
	Servers int
	// Clients is the number of client agents (nodes).
	Clients int
	// NodeMeta, when set, gives client i (from 0) its node_meta.
	NodeMeta func(i int) map[string]string
	// ACL as in Options, on every agent.
	ACL bool
	// ExtraConfig is merged into every agent's config (after FastGossip).
	ExtraConfig map[string]any
	// ConsulGossip keeps Consul's default LAN gossip timing instead of
	// FastGossip.
	ConsulGossip bool
}

// FastGossip is the LAN gossip timing of a fleet's agents (Consul's
// gossip_lan block; Consul's defaults are probe_interval 1s, probe_timeout
// 500ms, suspicion_mult 4, gossip_interval 200ms). Measured on a fleet of 3
// servers and 2 clients (TestFleet logs the figures): the servers mark an
// agent failed 1.2 to 2.2 seconds after Cut or kill -9 of it, 3 seconds
// after SIGSTOP, against 5 to 6 seconds with Consul's defaults.
var FastGossip = map[string]any{
	"probe_interval":  "300ms",
	"probe_timeout":   "150ms",
	"suspicion_mult":  3,
	"gossip_interval": "100ms",
}

// NewFleet starts a cluster whose every agent binds Serf and server RPC to
// its own loopback address (Agent.Addr, 127.77.x.y) while its HTTP API and
// DNS stay on 127.0.0.1: a node's mariposa always reaches its own agent, and
// Cut can isolate one agent from the others. Run as root, each agent also
// runs in a group of its own (as root still), which is how Cut finds the
// connections it opens from 127.0.0.1. It waits for a leader, for every
// node in the catalog, and for the clients' node meta there; the agents are
// killed at test cleanup.
//
// A node's address in the catalog, and so the default address of services
// registered through its agent (and what DNS answers for them), is its
// Addr: a service that should be reached at it must listen there (or on
// 0.0.0.0), not on 127.0.0.1 only.
func NewFleet(t testing.TB, o FleetOptions) *Cluster {
	t.Helper()
	if o.Servers == 0 {
		o.Servers = 3
	}
	addrs := LoopbackAddrs(t, o.Servers+o.Clients)
	if FirewallAvailable() == nil {
		sweepStaleTables(t)
	}
	root := os.Geteuid() == 0
	c := newCluster(t, o.Servers, o.Clients, func(server bool, i int) Options {
		addr := addrs[i]
		if !server {
			addr = addrs[o.Servers+i]
		}
		extra := map[string]any{}
		if !o.ConsulGossip {
			extra["gossip_lan"] = FastGossip
		}
		if !server && o.NodeMeta != nil {
			if m := o.NodeMeta(i); len(m) > 0 {
				extra["node_meta"] = m
			}
		}
		for k, v := range o.ExtraConfig {
			extra[k] = v
		}
		opt := Options{ACL: o.ACL, ExtraConfig: extra, addr: addr}
		if root {
			opt.gid = addrGID(addr)
		}
		return opt
	})
	// A node's meta reaches the catalog with the agent's first sync,
	// which can come after its node is there.
	if o.NodeMeta != nil {
		for i, a := range c.Clients {
			a.waitNodeMeta(t, o.NodeMeta(i), 30*time.Second)
		}
	}
	return c
}

// waitNodeMeta waits until the catalog has meta in the agent's node meta.
func (a *Agent) waitNodeMeta(t testing.TB, meta map[string]string, timeout time.Duration) {
	t.Helper()
	c := a.Client(t)
	var got map[string]string
	ok := WaitFor(timeout, func() bool {
		n, _, err := c.Catalog().Node(a.Name, nil)
		if err != nil || n == nil || n.Node == nil {
			return false
		}
		got = n.Node.Meta
		for k, v := range meta {
			if got[k] != v {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("node meta of %s is %v after %s, want %v", a.Name, got, timeout, meta)
	}
}

// WaitIsolated waits until the cut agent a sees every other agent failed,
// and returns how long that took (10 to 16 seconds after Cut measured with
// FastGossip: its probes back off as they go unanswered, and no peer
// confirms its suspicions). A cut healed before that has not settled: the
// suspicions still pending on a expire after the heal, and its verdicts
// then reach the others, which mark healthy nodes failed for a moment.
func (c *Cluster) WaitIsolated(t testing.TB, a *Agent, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for _, o := range c.Agents() {
		if o != a {
			a.WaitMemberStatus(t, o.Name, "failed", timeout-time.Since(start))
		}
	}
	return time.Since(start)
}

// Agent returns the cluster's agent named name, or nil.
func (c *Cluster) Agent(name string) *Agent {
	for _, a := range c.Agents() {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// addrGID is the group a fleet agent on addr runs in: the address as a
// number (127.77.x.y is 0x7f4dxxyy), as unique as the address is.
func addrGID(addr string) uint32 {
	return binary.BigEndian.Uint32(net.ParseIP(addr).To4())
}

// LoopbackAddrs returns n distinct loopback addresses in 127.77.0.0/16
// (Linux routes all of 127.0.0.0/8 to lo), each reserved across processes
// with a lock file held until this process exits, as FreePorts does for
// ports.
func LoopbackAddrs(t testing.TB, n int) []string {
	t.Helper()
	var addrs []string
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 100000 {
			t.Fatalf("loopback address: none free in 127.77.0.0/16")
		}
		addr := fmt.Sprintf("127.77.%d.%d", rand.IntN(256), 1+rand.IntN(254))
		if lockAddr(addr) {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

var (
	addrMu   sync.Mutex
	addrHeld = map[string]bool{}
	// addrLocks keeps the lock files' descriptors open for the life of
	// the process: the locks go with it.
	addrLocks []*os.File
)

func addrLockDir() string { return filepath.Join(os.TempDir(), "mariposa-test-addrs") }

// lockAddr reserves addr for this process, for good.
func lockAddr(addr string) bool {
	addrMu.Lock()
	defer addrMu.Unlock()
	if addrHeld[addr] {
		return false
	}
	f, ok := tryLockAddr(addr)
	if ok {
		addrHeld[addr] = true
		if f != nil {
			addrLocks = append(addrLocks, f)
		}
	}
	return ok
}

// tryLockAddr takes addr's lock file; f is nil when no lock file can be
// made (no reservation possible, and nothing else to go by).
func tryLockAddr(addr string) (f *os.File, ok bool) {
	if err := os.MkdirAll(addrLockDir(), 0o777); err != nil {
		return nil, true
	}
	f, err := os.OpenFile(filepath.Join(addrLockDir(), addr), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false // another process has it
	}
	return f, true
}

// ownAddr reports whether this process reserved addr.
func ownAddr(addr string) bool {
	addrMu.Lock()
	defer addrMu.Unlock()
	return addrHeld[addr]
}
