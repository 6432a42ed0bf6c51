package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// deploy runs `mariposa deploy` against agent and returns its output.
func deploy(t testing.TB, agent *consultest.Agent, args ...string) string {
	t.Helper()
	out, err := exec.Command(mariposaBin, append([]string{"deploy", "-consul-addr", agent.HTTPAddr()}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("mariposa deploy: %v\n%s", err, out)
	}
	return string(out)
}

// slotHolders reads slots/<unit>/: slot -> holding node ("" when free).
func slotHolders(t *testing.T, c *api.Client, unit string) map[int]string {
	t.Helper()
	h, err := holdersOf(c, unit, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		return nil
	}
	return h
}

// holdersOf reads slot -> holding node for unit, "" for a slot free,
// released or lost: a slot lost with its node has no key (the session's
// behavior is delete), and its claimed key says it was claimed.
func holdersOf(c *api.Client, unit string, q *api.QueryOptions) (map[int]string, error) {
	pairs, _, err := c.KV().List(cluster.SlotsPrefix+unit+"/", q)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, p := range pairs {
		_, k, ok := cluster.ParseSlotKey(p.Key)
		if !ok {
			continue // a slot's status key
		}
		v, _ := cluster.DecodeSlotValue(p.Value)
		if p.Session != "" {
			out[k] = v.Node
		} else {
			out[k] = ""
		}
	}
	claimed, _, err := c.KV().Keys(cluster.ClaimedPrefix+unit+"/", "", q)
	if err != nil {
		return nil, err
	}
	for _, key := range claimed {
		if k, err := strconv.Atoi(strings.TrimPrefix(key, cluster.ClaimedPrefix+unit+"/")); err == nil {
			if _, ok := out[k]; !ok {
				out[k] = ""
			}
		}
	}
	return out, nil
}

// slotLostWith is the node slot k of unit was lost with ("" none), as
// mariposa status reads it (cluster.ReadState: its key gone with its
// holder's session, its claimed key naming the last claimer); seen says
// what was read.
func slotLostWith(c *api.Client, unit string, k int) (node, seen string) {
	st, err := cluster.ReadState(c)
	if err != nil {
		return "", err.Error()
	}
	s, ok := st.Slots[unit][k]
	if !ok || s.Session != "" || s.Value.State != cluster.SlotHeld {
		return "", fmt.Sprintf("%+v (in state: %v)", s, ok)
	}
	return s.Value.Node, "lost with " + s.Value.Node
}

// fleetOf starts `mariposa run -cluster` next to every client agent and
// waits until every one is live in Consul: placement ranks only live
// supervisors, and a slot placed before the best node was up stays where it
// is (running instances never move for a better score).
func fleetOf(t *testing.T, cl *consultest.Cluster, files ...string) map[string]*mariposa {
	t.Helper()
	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		ms[a.Name] = startMariposa(t, a, nil, append([]string{"-cluster"}, files...)...)
	}
	c := cl.Servers[0].Client(t)
	waitFor(t, 60*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})
	return ms
}

// Count slots on a real cluster (3 servers, 5 clients, each with its own
// mariposa -cluster): an exclusive service deployed with count = 2 runs on
// two distinct nodes; kill -9 of a holder's mariposa, SIGSTOP of one (the
// documented frozen window, where its fenced write must fail) and kill -9
// of a holder's agent each move its slot to another node; count changes up
// and down; and at no time do two children run in one slot, or more than
// count in all, outside the frozen window. Every claim and release has its
// audit record.
func TestFleetExclusiveSlots(t *testing.T) {
	consultest.SkipShort(t, "fault injection in -short mode")
	cl := consultest.NewCluster(t, 3, 5)
	c := cl.Servers[0].Client(t)
	dir := t.TempDir()
	spec := func(count int) string {
		return writeHCL(t, fmt.Sprintf(`
service "api" {
  command   = ["/bin/sh", "-c", "exec %s -stamp-file %s/$MARIPOSA_NODE.$MARIPOSA_INSTANCE.stamps -env-file %s/$MARIPOSA_NODE.$MARIPOSA_INSTANCE.env"]
  count     = %d
  exclusive = true
  stop {
    timeout = "2s"
  }
}
`, childBin, dir, dir, count))
	}
	// One watch per (node, slot): the children's real starts and exits.
	type nodeSlot struct {
		node string
		slot int
	}
	watches := map[nodeSlot]*childWatch{}
	for _, a := range cl.Clients {
		for k := 0; k < 3; k++ {
			watches[nodeSlot{a.Name, k}] = watchChildren(t, filepath.Join(dir, fmt.Sprintf("%s.%d.stamps", a.Name, k)))
		}
	}
	ms := fleetOf(t, cl)
	out := deploy(t, cl.Servers[0], spec(2))
	if !strings.Contains(out, "spec 1") {
		t.Fatalf("deploy said %q", out)
	}
	if again := deploy(t, cl.Servers[0], spec(2)); !strings.Contains(again, "no change") {
		t.Fatalf("deploying the same spec again said %q", again)
	}

	// placed waits until count slots are held on distinct nodes other than
	// the excluded ones, each with exactly one passing instance, and
	// returns slot -> node.
	placed := func(count int, not ...string) map[int]string {
		t.Helper()
		var holders map[int]string
		waitFor(t, 60*time.Second, fmt.Sprintf("%d slots held on distinct nodes, none on %v", count, not), func() (bool, string) {
			holders = slotHolders(t, c, "api")
			nodes := map[string]bool{}
			for k := 0; k < count; k++ {
				n := holders[k]
				if n == "" || nodes[n] {
					return false, fmt.Sprint(holders)
				}
				for _, x := range not {
					if n == x {
						return false, fmt.Sprint(holders)
					}
				}
				nodes[n] = true
				if len(watches[nodeSlot{n, k}].running()) != 1 {
					return false, fmt.Sprintf("%v; no child of slot %d on %s yet", holders, k, n)
				}
			}
			for k, n := range holders {
				if k >= count && n != "" {
					return false, fmt.Sprintf("%v: slot %d above the count is held", holders, k)
				}
			}
			var passing []string
			es, _, _ := c.Health().Service("api", "", true, nil)
			for _, e := range es {
				passing = append(passing, e.Node.Node+"/"+e.Service.Meta["slot"])
			}
			if len(passing) != count {
				return false, fmt.Sprintf("%v; passing %v", holders, passing)
			}
			return true, ""
		})
		return holders
	}
	fenced := func(node string, slot int) bool {
		env := readEnv(t, filepath.Join(dir, fmt.Sprintf("%s.%d.env", node, slot)))
		idx, _ := strconv.ParseUint(env["MARIPOSA_SLOT_INDEX"], 10, 64)
		if env["MARIPOSA_INSTANCE"] != strconv.Itoa(slot) || env["MARIPOSA_SLOT_KEY"] != cluster.SlotKey("api", slot) {
			t.Errorf("%s slot %d: env %v", node, slot, env)
		}
		ok, _, _, err := c.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: cluster.SlotKey("api", slot), Index: idx}},
			{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "api-data", Value: []byte(node)}},
		}, nil)
		return err == nil && ok
	}

	holders := placed(2)
	var frozen []frozenWindow
	for i, fault := range []string{"kill-mariposa", "stop-mariposa", "kill-agent"} {
		victim := holders[0]
		if !fenced(victim, 0) {
			t.Fatalf("fault %d: %s cannot write with its own fencing token", i, victim)
		}
		t.Logf("fault %d: %s on %s (holders %v)", i, fault, victim, holders)
		switch fault {
		case "kill-mariposa":
			_ = ms[victim].cmd.Process.Signal(syscall.SIGKILL)
			<-ms[victim].done
			holders = placed(2, victim)
			// The records of website/operations.md.
			checkTakeoverEvents(t, cl.Servers[0], "api/0", victim, holders[0])
			ms[victim] = startMariposa(t, clientNamed(cl, victim), nil, "-cluster")
		case "stop-mariposa":
			from := leadertest.Mono()
			_ = ms[victim].cmd.Process.Signal(syscall.SIGSTOP)
			waitFor(t, 60*time.Second, "slot 0 taken over from the frozen node", func() (bool, string) {
				h := slotHolders(t, c, "api")
				return h[0] != "" && h[0] != victim, fmt.Sprint(h)
			})
			if fenced(victim, 0) {
				t.Errorf("fault %d: the frozen %s could still write after losing its slot", i, victim)
			}
			_ = ms[victim].cmd.Process.Signal(syscall.SIGCONT)
			waitFor(t, 10*time.Second, "the resumed node's child gone", func() (bool, string) {
				return len(watches[nodeSlot{victim, 0}].running()) == 0, fmt.Sprint(watches[nodeSlot{victim, 0}].running())
			})
			frozen = append(frozen, frozenWindow{node: victim, from: from, till: leadertest.Mono()})
			holders = placed(2)
		case "kill-agent":
			a := clientNamed(cl, victim)
			a.Kill()
			waitFor(t, 30*time.Second, "the cut-off node's child gone", func() (bool, string) {
				return len(watches[nodeSlot{victim, 0}].running()) == 0, fmt.Sprint(watches[nodeSlot{victim, 0}].running())
			})
			holders = placed(2, victim)
			checkTakeoverEvents(t, cl.Servers[0], "api/0", victim, holders[0])
			a.Start(t)
		}
	}

	// Count up, then down: slots above the count are released.
	deploy(t, cl.Servers[0], "-force", spec(3))
	placed(3)
	deploy(t, cl.Servers[0], "-force", spec(1))
	placed(1)
	pairs, _, _ := c.KV().List(cluster.SlotsPrefix+"api/", nil)
	for _, p := range pairs {
		if _, _, ok := cluster.ParseSlotKey(p.Key); !ok {
			continue // a slot's status key
		}
		v, err := cluster.DecodeSlotValue(p.Value)
		if err != nil {
			t.Errorf("%s: %v", p.Key, err)
		}
		if !strings.HasSuffix(p.Key, "/0") && (p.Session != "" || v.State != cluster.SlotReleased) {
			t.Errorf("%s after scale-down: session %q, %+v", p.Key, p.Session, v)
		}
	}

	// The audit log has every claim and release.
	actions := auditActions(t, c, "") // every unit and the deploys
	if actions["claim"] < 6 || actions["release"] < 2 || actions["deploy"] != 3 {
		t.Errorf("audit actions %v", actions)
	}

	// Overlaps: per slot, never two children at once; across slots, never
	// more than the count (3 at most here) outside a frozen window.
	type run struct {
		leadertest.Interval
		node string
		slot int
	}
	var all []run
	for ns, w := range watches {
		for _, iv := range w.intervals(t) {
			all = append(all, run{Interval: iv, node: ns.node, slot: ns.slot})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Start < all[j].Start })
	inFrozen := func(r run, a, b time.Duration) bool {
		for _, f := range frozen {
			if r.node == f.node && a >= f.from && b <= f.till+time.Second {
				return true
			}
		}
		return false
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			a, b := all[i], all[j]
			if a.slot != b.slot || !overlaps(a.Interval, b.Interval) {
				continue
			}
			from, till := max(a.Start, b.Start), a.Stop
			if till == 0 || (b.Stop != 0 && b.Stop < till) {
				till = b.Stop
			}
			if till == 0 {
				till = leadertest.Mono()
			}
			if inFrozen(a, from, till) || inFrozen(b, from, till) {
				continue
			}
			t.Errorf("slot %d: two children overlapped: %s %s and %s %s", a.slot, a.node, a.Who, b.node, b.Who)
		}
	}
	if len(all) < 6 {
		t.Errorf("only %d runs", len(all))
	}
}
