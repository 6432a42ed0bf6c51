package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// Placement, a network cut and rescheduling on a fleet whose nodes carry
// node meta (3 servers and 4 clients, each on its own loopback address):
//   - a hard constraint is never violated, and an affinity is preferred;
//   - `mariposa why` names the failed constraint with its position;
//   - an exclusive slot's holder cut off from the servers (nftables drops
//     its agent's traffic) kills its child, and another node takes the slot
//     only after that;
//   - a service that exhausts its restarts is rescheduled, with the history
//     in the slot and a penalty for the node, until its reschedules run out
//     and the slot is failed; `mariposa reset` clears it.
func TestFleetPlacementCutReschedule(t *testing.T) {
	consultest.SkipShort(t, "fault injection in -short mode")
	consultest.RequireFirewall(t)
	meta := []map[string]string{
		{"zone": "z1", "disk": "ssd"},
		{"zone": "z2", "disk": "hdd"},
		{"zone": "z2", "disk": "ssd"},
		{"zone": "z3", "disk": "ssd"},
	}
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 3, Clients: 4,
		NodeMeta: func(i int) map[string]string { return meta[i] }})
	c := cl.Servers[0].Client(t)
	zone := map[string]string{}
	disk := map[string]string{}
	for i, a := range cl.Clients {
		zone[a.Name], disk[a.Name] = meta[i]["zone"], meta[i]["disk"]
	}
	dir := t.TempDir()
	ms := fleetOf(t, cl)

	// Placement: not in z3, prefer ssd: the two ssd nodes of z1 and z2.
	web := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = ["/bin/sh", "-c", "exec %s -stamp-file %s/web.$MARIPOSA_NODE.stamps"]
  count   = 2
  constraint {
    attribute = "node.meta.zone"
    operator  = "!="
    value     = "z3"
  }
  affinity {
    attribute = "node.meta.disk"
    operator  = "==~"
    value     = "ssd"
    weight    = 100
  }
}
`, childBin, dir))
	webWatch := clientWatches(t, cl, dir, "web")
	deploy(t, cl.Servers[0], web)
	waitFor(t, 60*time.Second, "web on the two ssd nodes outside z3", func() (bool, string) {
		h := slotHolders(t, c, "web")
		ok := len(h) == 2
		for _, n := range h {
			ok = ok && n != "" && zone[n] != "z3" && disk[n] == "ssd"
		}
		return ok && len(passingInstances(c, "web")) == 2, fmt.Sprint(h)
	})
	out, err := exec.Command(mariposaBin, "why", "-consul-addr", cl.Servers[0].HTTPAddr(), "web").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `node.meta.zone = "z3" fails != "z3"`) || !strings.Contains(string(out), "services.hcl:") {
		t.Errorf("mariposa why web: %v\n%s", err, out)
	}

	// A network cut of an exclusive holder.
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
	deploy(t, cl.Servers[0], "-name", "db", db)
	var holder string
	waitFor(t, 60*time.Second, "db placed", func() (bool, string) {
		holder = slotHolders(t, c, "db")[0]
		return holder != "" && len(watches[holder].running()) == 1, holder
	})
	victim := cl.Agent(holder)
	victim.Cut(t)
	waitFor(t, 30*time.Second, "db taken over from the cut node", func() (bool, string) {
		h := slotHolders(t, c, "db")[0]
		return h != "" && h != holder && len(watches[h].running()) == 1, h
	})
	if n := len(watches[holder].running()); n != 0 {
		t.Errorf("the cut node still runs %d db children after another node took over", n)
	}
	victim.Heal(t)
	cl.Rejoin(t, victim)
	noOverlap(t, "db", watches)

	// A network cut of a non-exclusive holder: its child keeps running
	// while it is cut off (SPEC section 3), another node replaces the slot
	// once Consul has invalidated the cut node's session, and once the cut
	// heals the old holder sees the slot taken and stops its child.
	// web/0's child running on its holder first: the slots may still be
	// settling after the heal above (a read here found none: CI).
	var hs map[int]string
	var cutPID []int
	waitFor(t, 30*time.Second, "web/0 running on its holder", func() (bool, string) {
		hs = slotHolders(t, c, "web")
		if hs[0] == "" {
			return false, "no holder"
		}
		cutPID = webWatch[hs[0]].running()
		return len(cutPID) == 1, fmt.Sprintf("%s runs %v", hs[0], cutPID)
	})
	cut := cl.Agent(hs[0])
	cut.Cut(t)
	waitFor(t, 30*time.Second, "web/0 replaced on another node", func() (bool, string) {
		h := slotHolders(t, c, "web")[0]
		return h != "" && h != cut.Name && len(webWatch[h].running()) == 1, h
	})
	if got := webWatch[cut.Name].running(); len(got) != 1 || got[0] != cutPID[0] {
		t.Errorf("the cut non-exclusive holder's child did not keep running: %v, was %v", got, cutPID)
	}
	cut.Heal(t)
	cl.Rejoin(t, cut)
	waitFor(t, 30*time.Second, "the healed old holder's web child stopped", func() (bool, string) {
		return len(webWatch[cut.Name].running()) == 0, fmt.Sprint(webWatch[cut.Name].running())
	})

	// stop_after: a non-exclusive holder cut off from Consul stops its
	// child within a renewal period (TTL/2 = 5s) plus stop_after, and the
	// replacement waits as long: no two children at once. It starts on
	// db's node, which also holds an exclusive slot: the cut ends the
	// node's session there (the watchdog), and the non-exclusive instance
	// must still stop after stop_after, not before and not never.
	var dbNow string
	waitFor(t, 30*time.Second, "db held", func() (bool, string) {
		dbNow = slotHolders(t, c, "db")[0]
		return dbNow != "", fmt.Sprint(slotHolders(t, c, "db"))
	})
	lazy := writeHCL(t, fmt.Sprintf(`
service "lazy" {
  command    = ["/bin/sh", "-c", "exec %s -stamp-file %s/lazy.$MARIPOSA_NODE.stamps"]
  count      = 1
  stop_after = "2s"
  constraint {
    attribute = "node.name"
    value     = %q
  }
}
`, childBin, dir, dbNow))
	lazyWatch := clientWatches(t, cl, dir, "lazy")
	deploy(t, cl.Servers[0], "-name", "lazy", lazy)
	var lazyHolder string
	waitFor(t, 30*time.Second, "lazy placed", func() (bool, string) {
		lazyHolder = slotHolders(t, c, "lazy")[0]
		return lazyHolder != "" && len(lazyWatch[lazyHolder].running()) == 1, lazyHolder
	})
	if lazyHolder != dbNow {
		t.Fatalf("lazy placed on %s, not on db's node %s", lazyHolder, dbNow)
	}
	lazyCut := cl.Agent(lazyHolder)
	lazyCut.Cut(t)
	waitFor(t, 30*time.Second, "the cut holder's lazy child stopped while still cut off", func() (bool, string) {
		return len(lazyWatch[lazyHolder].running()) == 0, fmt.Sprint(lazyWatch[lazyHolder].running())
	})
	lazyCut.Heal(t)
	cl.Rejoin(t, lazyCut)
	// Only db's node is feasible: the slot comes back there.
	waitFor(t, 60*time.Second, "lazy running again", func() (bool, string) {
		h := slotHolders(t, c, "lazy")[0]
		return h == dbNow && len(lazyWatch[h].running()) == 1, h
	})
	noOverlap(t, "stop_after: lazy", lazyWatch)

	// Exhausted restarts reschedule, twice, then the slot fails.
	flaky := writeHCL(t, `
service "flaky" {
  command = ["/bin/sh", "-c", "exit 3"]
  count   = 1
  restart {
    attempts     = 1
    delay        = "100ms"
    on_exhausted = "reschedule"
  }
  reschedule {
    attempts = 2
    interval = "1h"
    delay    = "1s"
  }
}
`)
	deploy(t, cl.Servers[0], "-name", "flaky", flaky)
	var v cluster.SlotValue
	waitFor(t, 60*time.Second, "flaky's slot failed after its reschedules", func() (bool, string) {
		p, _, err := c.KV().Get(cluster.SlotKey("flaky", 0), nil)
		if err != nil || p == nil {
			return false, fmt.Sprint(err)
		}
		v, _ = cluster.DecodeSlotValue(p.Value)
		return p.Session == "" && v.State == cluster.SlotFailed, fmt.Sprintf("%+v", v)
	})
	if len(v.Reschedules) != 3 {
		t.Errorf("reschedule history %+v, want 3 entries (2 reschedules, then the failure)", v.Reschedules)
	}
	nodes := map[string]bool{}
	for _, e := range v.Reschedules {
		nodes[e.Node] = true
	}
	if len(nodes) < 2 {
		t.Errorf("flaky was not moved between nodes: %+v", v.Reschedules)
	}
	pens, _, _ := c.KV().List(cluster.PenaltyPrefix+"flaky/", nil)
	if len(pens) < 2 {
		t.Errorf("penalties: %d keys", len(pens))
	}
	consistently(t, 3*time.Second, "a failed slot stays unclaimed", func() (bool, string) {
		p, _, _ := c.KV().Get(cluster.SlotKey("flaky", 0), nil)
		return p != nil && p.Session == "", ""
	})
	// Before the reset: two reschedules, then the failure, each recorded.
	if a := auditActions(t, c, "flaky"); a["reschedule"] != 2 || a["fail"] != 1 || a["reset"] != 0 {
		t.Errorf("flaky's audit actions: %v", a)
	}
	out, err = exec.Command(mariposaBin, "reset", "-consul-addr", cl.Servers[0].HTTPAddr(), "flaky/0").CombinedOutput()
	if err != nil {
		t.Fatalf("mariposa reset flaky/0: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "flaky claimed again after the reset", func() (bool, string) {
		p, _, _ := c.KV().Get(cluster.SlotKey("flaky", 0), nil)
		if p == nil {
			return false, "missing"
		}
		nv, _ := cluster.DecodeSlotValue(p.Value)
		return p.Session != "" || len(nv.Reschedules) > 0 && nv.Reschedules[0].At.After(v.Since), fmt.Sprintf("%+v", nv)
	})
	if a := auditActions(t, c, "flaky"); a["reset"] != 1 {
		t.Errorf("flaky's audit actions after the reset: %v", a)
	}
	// A group moves and fails as one: its members share one slot on one
	// node, and a member that fails for good fails the group's slot and
	// stops the others.
	pod := writeHCL(t, fmt.Sprintf(`
group "pod" {
  count = 1
  service "good" {
    command = ["/bin/sh", "-c", "exec %s -stamp-file %s/good.stamps -env-file %s/good.env"]
  }
  service "bad" {
    command = ["/bin/sh", "-c", "echo bad env >&2; exit 3"]
    restart {
      attempts = 1
      delay    = "2s"
    }
  }
}
`, childBin, dir, dir))
	good := watchChildren(t, filepath.Join(dir, "good.stamps"))
	deploy(t, cl.Servers[0], "-name", "pod", pod)
	env := readEnv(t, filepath.Join(dir, "good.env"))
	if env["MARIPOSA_INSTANCE"] != "0" || env["MARIPOSA_SLOT_KEY"] != cluster.SlotKey("pod", 0) {
		t.Errorf("a group member's env: %v", env)
	}
	waitFor(t, 30*time.Second, "the pod's slot failed and its good member stopped", func() (bool, string) {
		p, _, _ := c.KV().Get(cluster.SlotKey("pod", 0), nil)
		if p == nil {
			return false, "no slot"
		}
		pv, _ := cluster.DecodeSlotValue(p.Value)
		return p.Session == "" && pv.State == cluster.SlotFailed && strings.Contains(pv.Reason, "member bad failed") &&
			len(good.running()) == 0, fmt.Sprintf("%+v, good running %v", pv, good.running())
	})

	// Co-location: a constraint on service.db places cache on db's node.
	var dbNode string
	waitFor(t, 30*time.Second, "one db instance registered", func() (bool, string) {
		inst := instancesOf(c, "db")
		for n := range inst {
			dbNode = n
		}
		return len(inst) == 1, fmt.Sprint(len(inst))
	})
	cache := writeHCL(t, fmt.Sprintf(`
service "cache" {
  command = [%q, "-stamp-file", "%s/cache.stamps"]
  count   = 1
  constraint {
    attribute = "service.db"
    operator  = "is_set"
  }
}
`, childBin, dir))
	deploy(t, cl.Servers[0], "-name", "cache", cache)
	waitFor(t, 30*time.Second, "cache on db's node "+dbNode, func() (bool, string) {
		h := slotHolders(t, c, "cache")[0]
		return h == dbNode, h
	})

	if a := auditActions(t, c, "pod"); a["fail"] != 1 {
		t.Errorf("pod's audit actions: %v", a)
	}
	_ = ms
}

// clientWatches watches the children of every client of cl whose stamp
// file is dir/<name>.<node>.stamps, by node.
func clientWatches(t *testing.T, cl *consultest.Cluster, dir, name string) map[string]*childWatch {
	t.Helper()
	w := map[string]*childWatch{}
	for _, a := range cl.Clients {
		w[a.Name] = watchChildren(t, filepath.Join(dir, name+"."+a.Name+".stamps"))
	}
	return w
}

// auditActions counts the audit records of a unit (every unit: "") by action.
func auditActions(t *testing.T, c *api.Client, unit string) map[string]int {
	t.Helper()
	recs, _, err := c.KV().List(cluster.AuditPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]int{}
	for _, p := range recs {
		var e cluster.AuditEvent
		if err := json.Unmarshal(p.Value, &e); err != nil {
			t.Errorf("audit record %s: %v", p.Key, err)
		}
		if e.Service == unit || unit == "" {
			actions[e.Action]++
		}
	}
	return actions
}

// noOverlap fails the test if two children of the watches (one per node)
// ever ran at the same time.
func noOverlap(t *testing.T, what string, watches map[string]*childWatch) {
	t.Helper()
	type runOf struct {
		node string
		iv   leadertest.Interval
	}
	var all []runOf
	for n, w := range watches {
		for _, iv := range w.intervals(t) {
			all = append(all, runOf{node: n, iv: iv})
		}
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if overlaps(all[i].iv, all[j].iv) {
				t.Errorf("%s: two children overlapped: %s %s and %s %s", what, all[i].node, all[i].iv, all[j].node, all[j].iv)
			}
		}
	}
}
