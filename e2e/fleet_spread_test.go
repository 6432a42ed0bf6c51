package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// Spread, node_lost_after and DNS on a real fleet (1 server, 6 clients in
// zones z1, z1, z2, z2, z3, z3, each client with its own loopback address
// and its own mariposa -cluster):
//   - spread: a count = 3 service with an affinity for z1 and a spread over
//     the zone ends with one instance per zone, where the affinity alone
//     would put two in z1 (see the comment at the spec for the scores);
//   - DNS: <service>.service.consul answers exactly count SRV records (the
//     service's port) and count A records, the holders' addresses, and
//     after a redeploy with a lower count the answers drop to the new count;
//   - reschedule.node_lost_after: when a holder's agent is killed (kill -9),
//     no other node takes its non-exclusive slot for node_lost_after from
//     the moment the slot lost its session, and another node does after
//     it; when the lost node comes back within the window it claims its
//     slot again itself (its instance kept running, the same process), and
//     the other nodes' timers never take the slot from it.
func TestFleetSpreadNodeLostDNS(t *testing.T) {
	consultest.SkipShort(t, "fault injection in -short mode")
	// Two nodes per zone: the node that must win a slot for the spread has
	// a second of its zone ranked right after it, so the spread holds even
	// when the best node is a step (200ms) late to claim on a loaded
	// machine (seen with one node per zone: the rank-0 node of z3 claimed
	// late and the z1 node ranked next took the slot). One server keeps the
	// agents to seven.
	zones := []string{"z1", "z1", "z2", "z2", "z3", "z3"}
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: len(zones),
		NodeMeta: func(i int) map[string]string { return map[string]string{"zone": zones[i]} }})
	c := cl.Servers[0].Client(t)
	zone := map[string]string{}
	for i, a := range cl.Clients {
		zone[a.Name] = zones[i]
	}
	dir := t.TempDir()
	// Placement ranks only live supervisors: every one is live before the
	// first deploy, and nothing else is placed yet (no load).
	fleetOf(t, cl)

	// (a) Spread against an affinity. Every score component is in [-1, 1]
	// and the total is their plain mean (fleet/placement/score.go), so one
	// affinity's or one spread's weight does not change its component:
	// the affinity gives +1 to both z1 nodes, the spread (no targets) +1
	// to a zone with no instance yet and -1 to a used zone once every used
	// zone is even; anti-affinity and load are negative on a node that
	// already holds a slot of web, 0 elsewhere. Slot 0 (nothing held:
	// spread 0 everywhere) goes to a z1 node, A, at +1/4. Slot 1: the
	// other z1 node B scores (affinity +1, spread -1, 0, 0)/4 = 0, the four
	// z2 and z3 nodes (0 + 1 + 0 + 0)/4 = +1/4: one of them wins, say z2.
	// Slot 2: the two z3 nodes +1/4, B 0, the other z2 node -1/4: z3 wins.
	// (Nodes claim in rank order, not slot order, but any order ends the
	// same: a z1 node scores +2/4 for the first slot it can take when
	// another zone holds one.) With the spread ignored, B scores
	// (+1 + 0 + 0)/3 against 0 for every other node at slot 1, and two
	// instances end in z1: one instance per zone is the spread's doing.
	port := freePort(t)
	web := func(count int) string {
		return writeHCL(t, fmt.Sprintf(`
service "web" {
  command = ["/bin/sh", "-c", "exec %s -stamp-file %s/web.$MARIPOSA_NODE.stamps"]
  port    = %d
  count   = %d
  affinity {
    attribute = "node.meta.zone"
    value     = "z1"
    weight    = 100
  }
  spread {
    attribute = "node.meta.zone"
  }
}
`, childBin, dir, port, count))
	}
	// placed waits until the count slots of web are held, each on its own
	// node, with count passing instances in the catalog, and returns slot
	// -> node. It does not wait for any particular placement: instances
	// never move for a better score, so what it returns is final.
	placed := func(count int) map[int]string {
		t.Helper()
		var holders map[int]string
		waitFor(t, 60*time.Second, fmt.Sprintf("web: %d slots held and %d passing instances", count, count), func() (bool, string) {
			holders = slotHolders(t, c, "web")
			held := 0
			for k, n := range holders {
				if n != "" {
					if k >= count {
						return false, fmt.Sprintf("%v: slot %d above the count still held", holders, k)
					}
					held++
				}
			}
			pass := passingInstances(c, "web")
			return held == count && len(pass) == count, fmt.Sprintf("holders %v, passing on %d nodes", holders, len(pass))
		})
		return holders
	}
	deploy(t, cl.Servers[0], "-name", "web", web(3))
	holders := placed(3)
	byZone := map[string][]string{}
	for _, n := range holders {
		byZone[zone[n]] = append(byZone[zone[n]], n)
	}
	t.Logf("spread: web's instances by zone: %v", byZone)
	if len(byZone) != 3 {
		t.Errorf("spread: web's 3 instances are in %d zones, want one per zone: %v", len(byZone), byZone)
	}

	// (c) DNS, from a server's DNS interface: exactly the holders.
	wantDNS := func(count int, holders map[int]string) {
		t.Helper()
		var want []string
		for k := 0; k < count; k++ {
			want = append(want, cl.Agent(holders[k]).Addr)
		}
		sort.Strings(want)
		waitFor(t, 30*time.Second, fmt.Sprintf("web.service.consul answers %v", want), func() (bool, string) {
			addrs, srvs, err := lookupService(cl.Servers[0], "web.service.consul")
			if err != nil {
				return false, err.Error()
			}
			ports := 0
			for _, s := range srvs {
				if int(s.Port) == port {
					ports++
				}
			}
			return slices.Equal(addrs, want) && len(srvs) == count && ports == count,
				fmt.Sprintf("A %v, %d SRV (%d on port %d)", addrs, len(srvs), ports, port)
		})
	}
	wantDNS(3, holders)
	// Scaling down stops slot 2's instance only: the ones that stay keep
	// running (a count is the fleet's business, not the process's).
	webWatch := map[int]*childWatch{}
	before := map[int][]int{}
	for k := 0; k < 2; k++ {
		webWatch[k] = watchChildren(t, filepath.Join(dir, "web."+holders[k]+".stamps"))
		waitFor(t, 10*time.Second, fmt.Sprintf("web/%d's child seen", k), func() (bool, string) {
			before[k] = webWatch[k].running()
			return len(before[k]) == 1, fmt.Sprint(before[k])
		})
	}
	deploy(t, cl.Servers[0], "-name", "web", "-force", web(2))
	holders = placed(2)
	wantDNS(2, holders)
	for k := 0; k < 2; k++ {
		if got := webWatch[k].running(); !slices.Equal(got, before[k]) {
			t.Errorf("scale-down restarted web/%d: children %v, were %v", k, got, before[k])
		}
	}

	// (b) node_lost_after on a non-exclusive slot.
	const lostAfter = 20 * time.Second
	keep := writeHCL(t, fmt.Sprintf(`
service "keep" {
  command = ["/bin/sh", "-c", "exec %s -stamp-file %s/keep.$MARIPOSA_NODE.stamps"]
  count   = 1
  reschedule {
    node_lost_after = "%s"
  }
}
`, childBin, dir, lostAfter))
	watches := clientWatches(t, cl, dir, "keep")
	deploy(t, cl.Servers[0], "-name", "keep", keep)
	var holder string
	waitFor(t, 60*time.Second, "keep placed and running", func() (bool, string) {
		holder = slotHolders(t, c, "keep")[0]
		return holder != "" && len(watches[holder].running()) == 1, holder
	})
	// lostSession kills node's agent and returns when the slot's key has
	// lost its session (Consul invalidated the node's session): the send
	// time of the first read that saw it, no later than a poll after it.
	lostSession := func(node string) time.Time {
		t.Helper()
		cl.Agent(node).Kill()
		var t0 time.Time
		waitFor(t, 30*time.Second, "keep/0 lost with "+node+" after the kill of its agent", func() (bool, string) {
			t0 = time.Now()
			lost, seen := slotLostWith(c, "keep", 0)
			return lost == node, seen
		})
		return t0
	}

	// The node does not come back: the slot waits node_lost_after (less a
	// margin for this poll's own lag), then another node takes it.
	victim := holder
	victimPID := watches[victim].running()
	t.Logf("node_lost_after: killing the agent of %s (zone %s), holder of keep/0", victim, zone[victim])
	t0 := lostSession(victim)
	consistently(t, lostAfter-1500*time.Millisecond-time.Since(t0), "keep/0 left to its lost node "+victim, func() (bool, string) {
		h := slotHolders(t, c, "keep")
		return h[0] == "", fmt.Sprint(h)
	})
	var taker string
	waitFor(t, 20*time.Second, "keep/0 taken by another node after node_lost_after", func() (bool, string) {
		taker = slotHolders(t, c, "keep")[0]
		return taker != "" && len(watches[taker].running()) == 1, taker
	})
	took := time.Since(t0)
	t.Logf("node_lost_after: %s took keep/0 %s after it lost its session", taker, took.Round(time.Millisecond))
	if taker == victim || took < lostAfter-1500*time.Millisecond {
		t.Errorf("keep/0 taken by %s %s after the session was lost, want another node after %s", taker, took, lostAfter)
	}
	// The lost node's instance ran on without its agent (non-exclusive);
	// back, it sees the slot taken and stops it.
	if got := watches[victim].running(); !slices.Equal(got, victimPID) {
		t.Errorf("the lost node's instance did not keep running while its agent was away: %v, was %v", got, victimPID)
	}
	cl.Agent(victim).Start(t)
	waitFor(t, 30*time.Second, "the lost node back: live again and its keep instance stopped", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients) && len(watches[victim].running()) == 0,
			fmt.Sprintf("%d live, %v running on %s", len(live), watches[victim].running(), victim)
	})

	// The node comes back within the window: it claims its slot again
	// itself (its fleet reclaims a lost non-exclusive slot at once, no
	// ranking and no node_lost_after wait, fleet.go reconcile), and its
	// instance is the same process. The other nodes' timers run out while
	// it holds the slot: they must not take it.
	back := taker
	backPID := watches[back].running()
	t.Logf("node_lost_after: killing the agent of %s and starting it again", back)
	t1 := lostSession(back)
	cl.Agent(back).Start(t)
	var again string
	waitFor(t, lostAfter-1500*time.Millisecond-time.Since(t1), "keep/0 held again", func() (bool, string) {
		again = slotHolders(t, c, "keep")[0]
		return again != "", again
	})
	t.Logf("node_lost_after: keep/0 held by %s %s after it lost its session", again, time.Since(t1).Round(time.Millisecond))
	if again != back {
		t.Fatalf("keep/0 taken by %s within node_lost_after, want the node back, %s", again, back)
	}
	consistently(t, lostAfter+3*time.Second-time.Since(t1), "keep/0 held by "+back+" past the other nodes' node_lost_after", func() (bool, string) {
		h := slotHolders(t, c, "keep")
		return h[0] == back, fmt.Sprint(h)
	})
	if got := watches[back].running(); !slices.Equal(got, backPID) {
		t.Errorf("the node back runs keep as %v, want its instance from before, %v", got, backPID)
	}
	for n, w := range watches {
		if n != back && len(w.running()) != 0 {
			t.Errorf("%s runs keep too: %v", n, w.running())
		}
	}
	// The slot's record: the node back claimed it from itself.
	p, _, err := c.KV().Get(cluster.SlotKey("keep", 0), nil)
	if err != nil || p == nil {
		t.Fatalf("keep/0: %v", err)
	}
	if v, _ := cluster.DecodeSlotValue(p.Value); v.Node != back || v.State != cluster.SlotHeld {
		t.Errorf("keep/0 after the node came back: %+v", v)
	}
	if !auditClaim(t, c, "keep/0", back, back) {
		t.Errorf("no audit record of %s claiming keep/0 again from itself", back)
	}
}

// lookupService asks agent's DNS interface for name's A and SRV records:
// the addresses, sorted, and the SRV records.
func lookupService(agent *consultest.Agent, name string) ([]string, []*net.SRV, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r := agent.Resolver()
	addrs, err := r.LookupHost(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(addrs)
	_, srvs, err := r.LookupSRV(ctx, "", "", name)
	if err != nil {
		return nil, nil, err
	}
	return addrs, srvs, nil
}

// auditClaim reports whether the audit log has a claim of slot by node
// from the node from.
func auditClaim(t *testing.T, c *api.Client, slot, from, node string) bool {
	t.Helper()
	recs, _, err := c.KV().List(cluster.AuditPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range recs {
		var e cluster.AuditEvent
		if err := json.Unmarshal(p.Value, &e); err != nil {
			continue
		}
		if e.Action == "claim" && e.Slot == slot && e.From == from && e.To == node {
			return true
		}
	}
	return false
}
