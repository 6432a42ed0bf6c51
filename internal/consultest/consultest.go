// Package consultest starts real Consul agents for tests: a single dev agent,
// or a cluster of servers and clients on loopback ports. Nothing here fakes
// Consul; tests that need Consul fail with a clear message when the binary is
// missing.
package consultest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consulbin"
)

// EnvBinary names the environment variable that points at the consul binary.
const EnvBinary = consulbin.EnvBinary

// Binary returns the path of the pinned consul binary: $MARIPOSA_CONSUL_BIN,
// else the cache that `make consul` fills.
func Binary() (string, error) { return consulbin.Find(false) }

// RequireBinary fails the test (not skips: a missing Consul is a broken setup)
// when the binary is missing.
func RequireBinary(t testing.TB) string {
	t.Helper()
	p, err := Binary()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// Ports are the loopback ports of one agent.
type Ports struct {
	HTTP, DNS, SerfLAN, SerfWAN, Server int
}

// Agent is one running consul agent.
type Agent struct {
	Name   string
	Server bool
	Dev    bool
	// Addr is the loopback address Serf and server RPC bind to and
	// advertise: 127.0.0.1, or the agent's own one in a fleet (NewFleet).
	// HTTP and DNS are always on 127.0.0.1.
	Addr    string
	Ports   Ports
	DataDir string
	LogPath string
	ACL     bool

	bin     string
	args    []string
	gid     uint32 // the agent's group in a fleet, which Cut matches its sockets by; 0 otherwise
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	logFile *os.File
	cut     string // the nft table that cuts it off, "" when not cut
}

// HTTPAddr is host:port of the HTTP API.
func (a *Agent) HTTPAddr() string { return fmt.Sprintf("127.0.0.1:%d", a.Ports.HTTP) }

// SerfAddr is host:port of Serf LAN, what other agents join.
func (a *Agent) SerfAddr() string { return net.JoinHostPort(a.Addr, strconv.Itoa(a.Ports.SerfLAN)) }

// DNSAddr is host:port of the DNS interface (UDP and TCP).
func (a *Agent) DNSAddr() string { return fmt.Sprintf("127.0.0.1:%d", a.Ports.DNS) }

// Client returns an API client for this agent.
func (a *Agent) Client(t testing.TB) *api.Client {
	t.Helper()
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = a.HTTPAddr()
	cfg.Token = ""
	if a.ACL {
		cfg.Token = ManagementToken
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("consul client: %v", err)
	}
	return c
}

// PID of the agent process, 0 when stopped.
func (a *Agent) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || a.cmd.Process == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

// Options tune an agent.
type Options struct {
	// Name is the node name; default a unique one.
	Name string
	// ExtraConfig is merged into the agent's JSON config (e.g. "acl").
	ExtraConfig map[string]any
	// ACL enables ACLs with default policy deny; ManagementToken is then
	// the initial management (and agent) token, used by Client.
	ACL bool

	addr string // bind and advertise address, default 127.0.0.1
	gid  uint32 // run the agent in this group (fleet agents, as root)
}

// ManagementToken is the management token of agents started with ACL.
const ManagementToken = "11111111-2222-3333-4444-555555555555"

// NewDev starts a dev agent (server, in-memory) and waits until it has a
// leader and its node is in the catalog. It is killed at test cleanup.
func NewDev(t testing.TB, opts ...Options) *Agent {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	a := newAgent(t, o, true, false)
	a.start(t)
	a.WaitReady(t, 30*time.Second)
	return a
}

// NewDevUnstarted allocates a dev agent's ports and files without starting
// it: for tests of what happens before Consul is up. Start it with Start.
func NewDevUnstarted(t testing.TB, opts ...Options) *Agent {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	return newAgent(t, o, true, false)
}

func newAgent(t testing.TB, o Options, dev, server bool) *Agent {
	t.Helper()
	bin := RequireBinary(t)
	name := o.Name
	if name == "" {
		name = fmt.Sprintf("node-%d", nextID())
	}
	addr := o.addr
	if addr == "" {
		addr = "127.0.0.1"
	}
	dir := t.TempDir()
	ports := Ports{}
	ps := FreePorts(t, 5)
	ports.HTTP, ports.DNS, ports.SerfLAN, ports.SerfWAN, ports.Server = ps[0], ps[1], ps[2], ps[3], ps[4]
	cfg := map[string]any{
		"node_name":               name,
		"bind_addr":               addr,
		"client_addr":             "127.0.0.1",
		"advertise_addr":          addr,
		"disable_host_node_id":    true,
		"disable_update_check":    true,
		"log_level":               "info",
		"enable_script_checks":    false,
		"leave_on_terminate":      false,
		"skip_leave_on_interrupt": true,
		"ports": map[string]any{
			"http": ports.HTTP, "dns": ports.DNS, "serf_lan": ports.SerfLAN,
			"serf_wan": ports.SerfWAN, "server": ports.Server,
			"grpc": -1, "grpc_tls": -1, "https": -1,
		},
		"performance": map[string]any{"raft_multiplier": 1},
	}
	if !dev {
		cfg["data_dir"] = filepath.Join(dir, "data")
	}
	if o.ACL {
		cfg["acl"] = map[string]any{
			"enabled": true, "default_policy": "deny", "down_policy": "extend-cache",
			"tokens": map[string]any{"initial_management": ManagementToken, "agent": ManagementToken},
		}
	}
	for k, v := range o.ExtraConfig {
		cfg[k] = v
	}
	cfgPath := filepath.Join(dir, "agent.json")
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"agent", "-config-file", cfgPath}
	if dev {
		args = append(args, "-dev")
	}
	a := &Agent{Name: name, Dev: dev, Server: server || dev, Addr: addr, Ports: ports, DataDir: dir,
		LogPath: filepath.Join(dir, "consul.log"), bin: bin, args: args, ACL: o.ACL, gid: o.gid}
	t.Cleanup(func() {
		a.Kill()
		a.heal()
		if t.Failed() {
			a.dumpLog(t)
		}
	})
	return a
}

func (a *Agent) start(t testing.TB) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		t.Fatalf("agent %s already running", a.Name)
	}
	lf, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(a.bin, a.args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own group, and die with the test binary so no agent outlives a crash.
	cmd.SysProcAttr = agentProcAttr(a.gid)
	if err := cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("start consul: %v", err)
	}
	a.cmd, a.logFile, a.done = cmd, lf, make(chan struct{})
	done := a.done
	go func() { cmd.Wait(); lf.Close(); close(done) }()
}

// Start starts a stopped agent again on the same ports and data dir (a dev
// agent comes back empty). It waits until the agent is ready.
func (a *Agent) Start(t testing.TB) {
	t.Helper()
	a.start(t)
	a.WaitReady(t, 30*time.Second)
}

// StartNoWait starts a stopped agent without waiting.
func (a *Agent) StartNoWait(t testing.TB) { t.Helper(); a.start(t) }

// Kill stops the agent with SIGKILL and waits for it to exit.
func (a *Agent) Kill() { a.signalAndWait(syscall.SIGKILL, 0) }

// Stop stops the agent with SIGTERM (SIGKILL after 10s).
func (a *Agent) Stop() { a.signalAndWait(syscall.SIGTERM, 10*time.Second) }

func (a *Agent) signalAndWait(sig syscall.Signal, grace time.Duration) {
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if sig != syscall.SIGKILL {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT) // a frozen agent must see it
	}
	if grace > 0 {
		select {
		case <-done:
			return
		case <-time.After(grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	<-done
}

// WaitReady waits until the agent answers, has a leader, and its own node is
// in the catalog (so registrations through it are visible).
func (a *Agent) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	c := a.Client(t)
	var last error
	ok := WaitFor(timeout, func() bool {
		leader, err := c.Status().Leader()
		if err != nil || leader == "" {
			last = fmt.Errorf("leader %q: %v", leader, err)
			return false
		}
		n, _, err := c.Catalog().Node(a.Name, nil)
		if err != nil || n == nil {
			last = fmt.Errorf("node %s not in catalog: %v", a.Name, err)
			return false
		}
		return true
	})
	if !ok {
		t.Fatalf("consul agent %s not ready after %s: %v", a.Name, timeout, last)
	}
}

func (a *Agent) dumpLog(t testing.TB) {
	b, err := os.ReadFile(a.LogPath)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("last lines of consul agent %s log:\n%s", a.Name, strings.Join(lines, "\n"))
}

// Log returns the agent's log so far.
func (a *Agent) Log() string {
	b, _ := os.ReadFile(a.LogPath)
	return string(b)
}

// Cluster is several agents joined on loopback.
type Cluster struct {
	Servers []*Agent
	Clients []*Agent
}

// NewCluster starts `servers` servers (bootstrap-expect) and `clients` client
// agents, all joined, and waits for a leader and for every node to be in the
// catalog. Every agent binds 127.0.0.1, with Consul's own gossip timing;
// NewFleet gives each its own address, for network faults.
func NewCluster(t testing.TB, servers, clients int) *Cluster {
	t.Helper()
	return newCluster(t, servers, clients, func(server bool, i int) Options { return Options{} })
}

// newCluster starts the agents, with the options opts(server, i) gives the
// i-th server or client (its name is set here).
func newCluster(t testing.TB, servers, clients int, opts func(server bool, i int) Options) *Cluster {
	t.Helper()
	if servers < 1 {
		t.Fatal("consultest: a cluster needs a server")
	}
	c := &Cluster{}
	for i := 0; i < servers; i++ {
		o := opts(true, i)
		o.Name = fmt.Sprintf("server-%d-%d", i+1, nextID())
		extra := map[string]any{"server": true, "bootstrap_expect": servers}
		for k, v := range o.ExtraConfig {
			extra[k] = v
		}
		o.ExtraConfig = extra
		c.Servers = append(c.Servers, newAgent(t, o, false, true))
	}
	var join []string
	for _, s := range c.Servers {
		join = append(join, s.SerfAddr())
	}
	for _, s := range c.Servers {
		s.args = append(s.args, retryJoin(join)...)
	}
	for i := 0; i < clients; i++ {
		o := opts(false, i)
		o.Name = fmt.Sprintf("client-%d-%d", i+1, nextID())
		a := newAgent(t, o, false, false)
		a.args = append(a.args, retryJoin(join)...)
		c.Clients = append(c.Clients, a)
	}
	for _, a := range c.Agents() {
		a.start(t)
	}
	for _, a := range c.Agents() {
		a.WaitReady(t, 60*time.Second)
	}
	return c
}

func retryJoin(addrs []string) []string {
	var args []string
	for _, a := range addrs {
		args = append(args, "-retry-join", a, "-retry-interval", "200ms")
	}
	return args
}

// Agents lists servers then clients.
func (c *Cluster) Agents() []*Agent {
	return append(append([]*Agent{}, c.Servers...), c.Clients...)
}

// FreePorts returns n distinct free TCP+UDP loopback ports. They come from
// below the kernel's ephemeral range, which it never hands out by itself
// (to a listener on port 0 or an outgoing connection), and each is reserved
// across processes with a lock file held until this process exits: test
// binaries of several packages run side by side, and a port handed to two
// of them made an agent fail with "address already in use".
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	lo, hi := portRange()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100000 {
			t.Fatalf("free port: none found in [%d, %d)", lo, hi)
		}
		p := lo + rand.IntN(hi-lo)
		if reserved(p) || !lockPort(p) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // taken by something else; keep it reserved
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		ports = append(ports, p)
	}
	return ports
}

// portRange is [lo, hi): up to 12,000 ports just below the ephemeral range,
// else above it.
func portRange() (lo, hi int) {
	elo, ehi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscanf(string(b), "%d %d", &elo, &ehi)
	}
	if elo > 11024 {
		return max(1024, elo-12000), elo
	}
	return ehi + 1, 65536
}

// portLocks keeps the lock files' descriptors open for the life of the
// process: the locks go with it.
var portLocks []*os.File

// lockPort reserves p across processes.
func lockPort(p int) bool {
	dir := filepath.Join(os.TempDir(), "mariposa-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no reservation possible; the bind check still runs
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false // another process has it
	}
	portMu.Lock()
	portLocks = append(portLocks, f)
	portMu.Unlock()
	return true
}

var (
	portMu   sync.Mutex
	portUsed = map[int]bool{}
	idMu     sync.Mutex
	idNext   int
)

// reserved remembers ports handed out in this process so parallel tests never
// get the same one between close and consul's bind.
func reserved(p int) bool {
	portMu.Lock()
	defer portMu.Unlock()
	if portUsed[p] {
		return true
	}
	portUsed[p] = true
	return false
}

func nextID() int {
	idMu.Lock()
	defer idMu.Unlock()
	idNext++
	return os.Getpid()*1000 + idNext
}

// WaitFor polls cond every 10ms until it holds or timeout passes. Tests use
// it to wait on conditions with a deadline instead of sleeping.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Grep reports whether the agent log contains s (for diagnosing tests).
func (a *Agent) Grep(s string) bool {
	f, err := os.Open(a.LogPath)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(s)) {
			return true
		}
	}
	return false
}

// Resolver returns a resolver that asks this agent's DNS interface.
func (a *Agent) Resolver() *net.Resolver {
	addr := a.DNSAddr()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}
