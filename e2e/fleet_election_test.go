package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A Consul leader election must not kill the fleet's instances (issue 33).
// Three servers (Consul's gossip defaults, raft_multiplier 1 as every test
// cluster), two clients each with `mariposa run -cluster` and a leader-mode
// service; an exclusive unit and a non-exclusive one, count 2 each. The
// leading server is killed (kill -9), and then, each time once the servers
// are healthy again, stopped and started, and made to leave and started,
// as in a rolling upgrade. Every child keeps running (same PIDs, none
// ended), no slot key and no leader key changes hands (same session, same
// fencing index), and no audit record is written. Before the fix every
// exclusive instance and the leader were SIGKILLed at lock_delay/2 after
// the last confirmation; before the leader probe (serverProbe), those on
// an agent that talked to the restarted server were.
func TestFleetRidesConsulElection(t *testing.T) {
	consultest.SkipShort(t, "3-server cluster in -short mode")
	cl := consultest.NewCluster(t, 3, 2)
	c := cl.Clients[0].Client(t) // a client agent: a server is killed
	dir := t.TempDir()
	unit := func(name string, exclusive bool) string {
		return writeHCL(t, fmt.Sprintf(`
service %q {
  command   = ["/bin/sh", "-c", "exec %s -stamp-file %s/%s.$MARIPOSA_NODE.stamps"]
  count     = 2
  exclusive = %v
  stop {
    timeout = "2s"
  }
}
`, name, childBin, dir, name, exclusive))
	}
	key := "mariposa/leader/web-" + strconv.Itoa(os.Getpid())
	web := leaderHCL(t, key, "standby", dir+"/web.stamps", dir)
	watches := map[string]map[string]*childWatch{
		"ex": clientWatches(t, cl, dir, "ex"), "shared": clientWatches(t, cl, dir, "shared"),
	}
	webWatch := watchChildren(t, dir+"/web.stamps")
	fleetOf(t, cl, web)
	deploy(t, cl.Clients[0], "-name", "ex", unit("ex", true))
	deploy(t, cl.Clients[0], "-name", "shared", unit("shared", false))

	running := func() map[string][]int {
		out := map[string][]int{"web": webWatch.running()}
		for name, ws := range watches {
			for node, w := range ws {
				out[name+"@"+node] = w.running()
				slices.Sort(out[name+"@"+node])
			}
		}
		return out
	}
	// holds reads every slot key and the leader key: key -> session and
	// fencing index.
	holds := func() (map[string]string, error) {
		out := map[string]string{}
		for _, name := range []string{"ex", "shared"} {
			pairs, _, err := c.KV().List(cluster.SlotsPrefix+name+"/", &api.QueryOptions{RequireConsistent: true})
			if err != nil {
				return nil, err
			}
			for _, p := range pairs {
				if _, _, ok := cluster.ParseSlotKey(p.Key); ok {
					out[p.Key] = fmt.Sprintf("%s@%d", p.Session, p.ModifyIndex)
				}
			}
		}
		p, _, err := c.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
		if err != nil || p == nil {
			return nil, fmt.Errorf("leader key: %v", err)
		}
		out[key] = fmt.Sprintf("%s@%d", p.Session, p.ModifyIndex)
		return out, nil
	}
	var before map[string]string
	waitFor(t, 90*time.Second, "every instance placed and running", func() (bool, string) {
		ex, shared := slotHolders(t, c, "ex"), slotHolders(t, c, "shared")
		r := running()
		n := 0
		for k, pids := range r {
			if k != "web" {
				n += len(pids)
			}
		}
		h, err := holds()
		before = h
		return err == nil && len(ex) == 2 && ex[0] != "" && ex[1] != "" && ex[0] != ex[1] &&
				len(shared) == 2 && shared[0] != "" && shared[1] != "" && n == 4 && len(r["web"]) == 1,
			fmt.Sprintf("ex %v shared %v running %v holds %v %v", ex, shared, r, h, err)
	})
	// The deployments finish (every instance healthy) before the faults,
	// so that the audit holds still.
	var audits map[string]int
	waitFor(t, 60*time.Second, "both deployments successful", func() (bool, string) {
		audits = auditActions(t, c, "")
		return audits["deploy-successful"] == 2 && audits["healthy"] == 4, fmt.Sprint(audits)
	})
	pids := running()
	t.Logf("placed: %v; holds %v", pids, before)

	// The leading server stopped (SIGTERM: a server does not leave on it
	// by default) and started again at once on its data, as in a rolling
	// upgrade; then the two other servers, one after the other; the
	// leading server killed (kill -9); and made to leave (`consul leave`,
	// which hands its leadership over first) and started again, as the
	// upgrade procedure Consul documents. A restarted server holds even
	// stale reads until it hears from a leader; its Status.Leader answers
	// "no leader" at once, and that is what the holders on the agents that
	// talk to it see.
	for _, how := range []string{"leader restarted", "followers restarted", "leader killed", "leader left"} {
		waitFor(t, 90*time.Second, "the servers tolerate a failure", func() (bool, string) {
			h, err := c.Operator().AutopilotServerHealth(nil)
			return err == nil && h.Healthy && h.FailureTolerance >= 1, fmt.Sprint(h, err)
		})
		srv := raftLeaderOf(t, cl, c)
		if how == "leader restarted" {
			// The server a client agent sends its RPCs to leads, so that a
			// holder's reads go to the server that restarts (which holds
			// them); the leadership moves there first if need be.
			srv = leadFromServerOf(t, cl, c)
		}
		t0 := time.Now()
		switch how {
		case "leader killed":
			srv.Kill()
		case "leader restarted":
			srv.Stop()
			srv.StartNoWait(t)
		case "followers restarted":
			// The rest of a rolling upgrade: no election, but an agent
			// that talks to a follower started again has its reads held
			// until the leader reaches it.
			for _, f := range cl.Servers {
				if f == srv {
					continue
				}
				f.Stop()
				f.StartNoWait(t)
				f.WaitReady(t, 60*time.Second)
				waitFor(t, 90*time.Second, "the servers healthy again", func() (bool, string) {
					h, err := c.Operator().AutopilotServerHealth(nil)
					return err == nil && h.Healthy && h.FailureTolerance >= 1, fmt.Sprint(h, err)
				})
			}
		case "leader left":
			bin, err := consultest.Binary()
			if err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "leave", "-http-addr="+srv.HTTPAddr()).CombinedOutput(); err != nil {
				t.Fatalf("consul leave: %v: %s", err, out)
			}
			srv.Stop() // waits for it to exit
			srv.StartNoWait(t)
		}
		acted := time.Since(t0)
		waitFor(t, 60*time.Second, "a new Raft leader", func() (bool, string) {
			_, err := holds()
			return err == nil, fmt.Sprint(err)
		})
		elected := time.Since(t0)
		// A hold that did not ride the election ends within the rule's
		// deadline (4.5s after its last confirmation): watch for longer.
		consistently(t, 6*time.Second, "every child keeps running", func() (bool, string) {
			r := running()
			return fmt.Sprint(r) == fmt.Sprint(pids), fmt.Sprintf("%v, was %v", r, pids)
		})
		after, err := holds()
		if err != nil || fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("%s: holds %v (%v), were %v", how, after, err, before)
		}
		t.Logf("%s (in %v): a leader answered after %v; every instance and hold kept", how, acted.Round(time.Millisecond), elected.Round(time.Millisecond))
		switch how {
		case "leader killed":
			srv.Start(t)
		case "leader restarted", "leader left":
			srv.WaitReady(t, 60*time.Second)
		}
	}
	if got := auditActions(t, c, ""); fmt.Sprint(got) != fmt.Sprint(audits) {
		t.Errorf("audit records during the elections: %v, were %v", got, audits)
	}
}

// leadFromServerOf makes a server that a client agent of cl has an RPC
// connection to the Raft leader (a leadership transfer, waited for), and
// returns it.
func leadFromServerOf(t *testing.T, cl *consultest.Cluster, c *api.Client) *consultest.Agent {
	t.Helper()
	var srv *consultest.Agent
	for _, a := range cl.Clients {
		ports := remotePorts(t, a.PID())
		t.Logf("%s has connections to ports %v", a.Name, ports)
		for _, s := range cl.Servers {
			if slices.Contains(ports, s.Ports.Server) {
				srv = s
				break
			}
		}
		if srv != nil {
			break
		}
	}
	if srv == nil {
		t.Fatal("no client agent has a connection to a server")
	}
	if raftLeaderOf(t, cl, c) == srv {
		return srv
	}
	conf, err := c.Operator().RaftGetConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	id := ""
	for _, s := range conf.Servers {
		if s.Node == srv.Name {
			id = s.ID
		}
	}
	if _, err := c.Operator().RaftLeaderTransfer(id, nil); err != nil {
		t.Fatalf("transfer the leadership to %s (%q): %v", srv.Name, id, err)
	}
	waitFor(t, 30*time.Second, srv.Name+" leads", func() (bool, string) {
		l := raftLeaderOf(t, cl, c)
		return l == srv, l.Name
	})
	return srv
}

// remotePorts lists the remote ports of process pid's established TCP
// connections (Linux /proc; every test agent is on the loopback).
func remotePorts(t *testing.T, pid int) []int {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			if len(f) < 10 || f[3] != "01" || !inodes[f[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(f[2], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports = append(ports, int(p))
			}
		}
	}
	return ports
}

// raftLeaderOf returns the server agent that leads, as c's agent says.
func raftLeaderOf(t *testing.T, cl *consultest.Cluster, c *api.Client) *consultest.Agent {
	t.Helper()
	var leader *consultest.Agent
	waitFor(t, 30*time.Second, "a Raft leader", func() (bool, string) {
		addr, err := c.Status().Leader()
		for _, a := range cl.Servers {
			if addr == fmt.Sprintf("%s:%d", a.Addr, a.Ports.Server) {
				leader = a
				return true, ""
			}
		}
		return false, fmt.Sprint(addr, err)
	})
	return leader
}

// The minority side of a partition still dies in time (issue 33): the
// holder of an exclusive slot and one follower server are cut off from the
// two other servers and the other client. The minority server loses its
// leader, so the holder may see "no leader" answers and extend its bound
// to D + lock_delay/2 (D read from its agent: FastGossip's 3 x 300ms); the
// majority declares the holder's node failed by gossip, no sooner than D,
// invalidates its session, and the other client claims the slot a lock
// delay later. The old child must be dead before the new one starts.
func TestFleetMinorityPartitionDiesInTime(t *testing.T) {
	consultest.SkipShort(t, "network partition in -short mode")
	consultest.RequireFirewall(t)
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 3, Clients: 2})
	dir := t.TempDir()
	db := writeHCL(t, fmt.Sprintf(`
service "db" {
  command   = ["/bin/sh", "-c", "exec %s -stamp-file %s/db.$MARIPOSA_NODE.stamps"]
  count     = 1
  exclusive = true
  stop {
    timeout = "2s"
  }
}
`, childBin, dir))
	watches := clientWatches(t, cl, dir, "db")
	ms := fleetOf(t, cl)
	deploy(t, cl.Servers[0], "-name", "db", db)
	var holder string
	waitFor(t, 60*time.Second, "db placed", func() (bool, string) {
		holder = slotHolders(t, cl.Servers[0].Client(t), "db")[0]
		return holder != "" && len(watches[holder].running()) == 1, holder
	})
	// The minority: the holder and a server that does not lead.
	var other *consultest.Agent
	for _, a := range cl.Clients {
		if a.Name != holder {
			other = a
		}
	}
	c := other.Client(t)
	lead := raftLeaderOf(t, cl, c)
	var follower *consultest.Agent
	for _, s := range cl.Servers {
		if s != lead {
			follower = s
			break
		}
	}
	heal := cl.Partition(t, cl.Agent(holder), follower)
	t0 := time.Now()
	waitFor(t, 60*time.Second, "db taken over by the majority side", func() (bool, string) {
		h := slotHolders(t, c, "db")[0]
		return h == other.Name && len(watches[h].running()) == 1, h
	})
	t.Logf("taken over %v after the partition", time.Since(t0).Round(time.Millisecond))
	for _, line := range strings.Split(ms[holder].out.String(), "\n") {
		if strings.Contains(line, "session lost") || strings.Contains(line, "proves=no-leader") {
			t.Logf("minority holder: %s", line)
		}
	}
	if n := len(watches[holder].running()); n != 0 {
		t.Errorf("the minority holder still runs %d db children after the majority took over", n)
	}
	noOverlap(t, "minority partition: db", watches)
	heal()
}
