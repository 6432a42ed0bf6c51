package consultest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// One fleet, its faults in turn: addresses and node meta, a network cut and
// its healing, kill -9 of an agent and its restart, a frozen agent.
func TestFleet(t *testing.T) {
	SkipShort(t, "fleet test in -short mode")
	RequireFirewall(t)
	cl := NewFleet(t, FleetOptions{Clients: 2, NodeMeta: func(i int) map[string]string {
		return map[string]string{"zone": fmt.Sprintf("z%d", i+1)}
	}})
	cut, other := cl.Clients[0], cl.Clients[1]
	srv := cl.Servers[0]

	t.Run("addresses", func(t *testing.T) {
		seen := map[string]bool{}
		for _, a := range cl.Agents() {
			if !strings.HasPrefix(a.Addr, "127.77.") || seen[a.Addr] {
				t.Fatalf("%s binds %s (seen %v)", a.Name, a.Addr, seen[a.Addr])
			}
			seen[a.Addr] = true
			if got := agentGID(t, a.PID()); got != addrGID(a.Addr) {
				t.Errorf("%s runs in group %d, want %d", a.Name, got, addrGID(a.Addr))
			}
		}
		ms, err := srv.Client(t).Agent().Members(false)
		if err != nil || len(ms) != 5 {
			t.Fatalf("members %d, %v; want 5", len(ms), err)
		}
		for _, m := range ms {
			if a := cl.Agent(m.Name); a == nil || m.Addr != a.Addr {
				t.Errorf("member %s at %s, want its own address", m.Name, m.Addr)
			}
		}
		for i, a := range cl.Clients {
			n, _, err := srv.Client(t).Catalog().Node(a.Name, nil)
			if err != nil || n == nil || n.Node.Meta["zone"] != fmt.Sprintf("z%d", i+1) || n.Node.Address != a.Addr {
				t.Fatalf("catalog node %s: %+v, %v", a.Name, n.Node, err)
			}
		}
	})

	t.Run("cut", func(t *testing.T) {
		if err := consistentRead(cut); err != nil {
			t.Fatalf("before the cut: %v", err)
		}
		start := time.Now()
		cut.Cut(t)
		failed := srv.WaitMemberStatus(t, cut.Name, "failed", 30*time.Second)
		cl.WaitSerfHealth(t, cut.Name, api.HealthCritical, 30*time.Second)
		t.Logf("cut: Serf marked %s failed after %s, serfHealth critical after %s",
			cut.Name, failed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		// The node's own API still answers; what needs the servers fails.
		c, _ := cut.quickClient(2 * time.Second)
		if self, err := c.Agent().Self(); err != nil || self["Config"]["NodeName"] != cut.Name {
			t.Fatalf("agent/self of the cut agent: %v", err)
		}
		if err := consistentRead(cut); err == nil {
			t.Fatal("a consistent read through the cut agent succeeded")
		}
		if err := consistentRead(other); err != nil {
			t.Fatalf("a consistent read through another agent: %v", err)
		}
		// Healed before the cut settles, its pending suspicions would
		// still expire and mark healthy nodes failed for a moment.
		cl.WaitIsolated(t, cut, 60*time.Second)
		t.Logf("cut: %s saw every other agent failed after %s", cut.Name, time.Since(start).Round(time.Millisecond))

		start = time.Now()
		cut.Heal(t)
		cl.Rejoin(t, cut)
		srv.WaitMemberStatus(t, cut.Name, "alive", 30*time.Second)
		cl.WaitSerfHealth(t, cut.Name, api.HealthPassing, 30*time.Second)
		alive := time.Since(start)
		if !WaitFor(30*time.Second, func() bool { return consistentRead(cut) == nil }) {
			t.Fatalf("after the heal: %v", consistentRead(cut))
		}
		t.Logf("heal and rejoin: %s passing after %s, a consistent read through it works after %s",
			cut.Name, alive.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		// The others saw no failure but the cut agent's.
		for _, a := range cl.Agents() {
			if a != cut && a.Grep("EventMemberFailed: "+a.Name) {
				t.Errorf("%s was marked failed", a.Name)
			}
		}
	})

	t.Run("kill", func(t *testing.T) {
		start := time.Now()
		other.Kill()
		failed := srv.WaitMemberStatus(t, other.Name, "failed", 30*time.Second)
		cl.WaitSerfHealth(t, other.Name, api.HealthCritical, 30*time.Second)
		t.Logf("kill -9: Serf marked %s failed after %s, serfHealth critical after %s",
			other.Name, failed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		other.Start(t)
		cl.WaitSerfHealth(t, other.Name, api.HealthPassing, 60*time.Second)
	})

	t.Run("freeze", func(t *testing.T) {
		start := time.Now()
		other.Freeze(t)
		if s := procState(other.PID()); s != "T" {
			t.Fatalf("frozen agent in state %q", s)
		}
		if err := consistentRead(other); err == nil {
			t.Fatal("a frozen agent answered")
		}
		srv.WaitMemberStatus(t, other.Name, "failed", 30*time.Second)
		t.Logf("SIGSTOP: Serf marked %s failed after %s", other.Name, time.Since(start).Round(time.Millisecond))
		other.Thaw()
		srv.WaitMemberStatus(t, other.Name, "alive", 60*time.Second)
		cl.WaitSerfHealth(t, other.Name, api.HealthPassing, 60*time.Second)
	})
}

// consistentRead reads a key through a with ?consistent, which the servers'
// leader must answer.
func consistentRead(a *Agent) error {
	c, err := a.quickClient(3 * time.Second)
	if err != nil {
		return err
	}
	_, _, err = c.KV().Get("consultest/cut", &api.QueryOptions{RequireConsistent: true})
	return err
}

// agentGID is the real group of process pid.
func agentGID(t *testing.T, pid int) uint32 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Gid:" {
			g, _ := strconv.ParseUint(f[1], 10, 32)
			return uint32(g)
		}
	}
	t.Fatalf("no Gid in /proc/%d/status", pid)
	return 0
}

// procState is the state letter of process pid ("T" when stopped).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

func TestFreeze(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	thaw := Freeze(t, cmd.Process.Pid)
	if s := procState(cmd.Process.Pid); s != "T" {
		t.Fatalf("state %q after Freeze", s)
	}
	thaw()
	if !WaitFor(5*time.Second, func() bool { return procState(cmd.Process.Pid) == "S" }) {
		t.Fatalf("state %q after thaw", procState(cmd.Process.Pid))
	}
}

// Addresses are distinct, and locked against other processes.
func TestLoopbackAddrs(t *testing.T) {
	as := LoopbackAddrs(t, 20)
	seen := map[string]bool{}
	for _, a := range as {
		if !strings.HasPrefix(a, "127.77.") || seen[a] {
			t.Fatalf("address %s (seen %v)", a, seen[a])
		}
		seen[a] = true
	}
	requireFlock(t)
	for _, a := range as {
		if err := exec.Command("flock", "-n", addrLockDir()+"/"+a, "true").Run(); err == nil {
			t.Fatalf("address %s is not locked against other processes", a)
		}
	}
}

// A table that a dead process left goes at the next NewFleet; one whose
// address another live process holds stays, and so does one of ours in
// place.
func TestSweepStaleTables(t *testing.T) {
	RequireFirewall(t)
	requireFlock(t)
	mine := LoopbackAddrs(t, 1)[0]
	// An address no one holds, and one that another process holds.
	free, held := freeAddr(t, ""), ""
	held = freeAddr(t, free)
	other := exec.Command("flock", addrLockDir()+"/"+held, "sleep", "60")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-other.Process.Pid, syscall.SIGKILL); other.Wait() })
	if !WaitFor(5*time.Second, func() bool {
		f, ok := tryLockAddr(held)
		if f != nil {
			f.Close()
		}
		return !ok
	}) {
		t.Fatal("flock(1) did not take the lock")
	}
	stale := func(pid int, addr string) string {
		name := fmt.Sprintf("%s%d_%s", tablePrefix, pid, strings.ReplaceAll(addr, ".", "_"))
		if err := nft("add table ip " + name + "\n"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nft("delete table ip " + name + "\n") })
		return name
	}
	deadFree, deadMine, liveHeld := stale(999999, free), stale(999998, mine), stale(other.Process.Pid, held)
	sweepStaleTables(t)
	tables := listTables(t)
	for name, want := range map[string]bool{deadFree: false, deadMine: false, liveHeld: true} {
		if tables[name] != want {
			t.Errorf("table %s there: %v, want %v", name, tables[name], want)
		}
	}
}

// freeAddr is an address outside the fleets' range that no process holds,
// other than not.
func freeAddr(t *testing.T, not string) string {
	for i := 0; i < 1000; i++ {
		a := fmt.Sprintf("127.78.%d.%d", i/254, 1+i%254) // no fleet allocates these
		if a == not || ownAddr(a) {
			continue
		}
		if f, ok := tryLockAddr(a); ok && f != nil {
			f.Close()
			return a
		}
	}
	t.Fatal("no free address")
	return ""
}

func listTables(t *testing.T) map[string]bool {
	out, err := exec.Command("nft", "list", "tables", "ip").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			m[f[2]] = true
		}
	}
	return m
}
