package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/command"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// The storm brake on a real fleet (3 servers, 5 clients, each with its own
// mariposa -cluster): kill -9 of three of the five client agents at once is
// more than half of the supervisors vanishing within a minute. A surviving
// node engages the brake (control/storm, with its audit record); the slots
// lost with the dead nodes are not taken over, well past the lock delay and
// rank delays that normally move them within a few seconds, while a newly
// deployed unit is still placed, and the survivors' liveness checks say
// why they wait; `mariposa resume` lifts the brake and the survivors take
// the lost slots over.
func TestFleetStormBrake(t *testing.T) {
	consultest.SkipShort(t, "fault injection in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 3, Clients: 5})
	c := cl.Servers[0].Client(t)
	fleetOf(t, cl)
	spec := func(name string, count int) string {
		return writeHCL(t, fmt.Sprintf(`
service %q {
  command      = ["sleep", "600"]
  count        = %d
  max_per_node = 3
}
`, name, count))
	}
	deploy(t, cl.Servers[0], "-name", "api", spec("api", 5))
	waitFor(t, 60*time.Second, "api at count 5", func() (bool, string) {
		h := slotHolders(t, c, "api")
		n := 0
		for _, node := range h {
			if node != "" {
				n++
			}
		}
		return n == 5 && passingCount(c, "api") == 5, fmt.Sprint(h)
	})

	// Victims: three nodes, those holding slots first.
	held := map[string]int{}
	for _, n := range slotHolders(t, c, "api") {
		held[n]++
	}
	names := make([]string, 0, len(cl.Clients))
	for _, a := range cl.Clients {
		names = append(names, a.Name)
	}
	sort.SliceStable(names, func(i, j int) bool { return held[names[i]] > held[names[j]] })
	victims := names[:3]
	sort.Strings(victims)
	lost := 0
	for _, v := range victims {
		lost += held[v]
	}
	for _, v := range victims {
		cl.Agent(v).Kill()
	}
	t.Logf("killed the agents of %v, holding %d of api's 5 slots", victims, lost)

	var rec *cluster.StormRecord
	waitFor(t, 30*time.Second, "the storm brake engaged", func() (bool, string) {
		r, err := cluster.ReadStorm(c)
		rec = r
		return r != nil, fmt.Sprint(err)
	})
	if !slices.Equal(rec.Vanished, victims) || rec.Base != 5 || slices.Contains(victims, rec.Node) {
		t.Errorf("storm record %+v; want vanished %v of 5, written by a survivor", rec, victims)
	}
	if n := auditActions(t, c, "")["storm-brake"]; n != 1 {
		t.Errorf("%d storm-brake audit records, want 1", n)
	}

	// The lost slots: their sessions are invalidated. Slots lost before the
	// third node vanished may have been taken over already (one node lost
	// is a node loss, not a storm), but only those of one node: the
	// takeover budget of a 5-node fleet is one lost node per 10s. Once the
	// brake is engaged nobody takes the rest over (a takeover takes a lock
	// delay of 1s plus rank steps).
	free := func() (int, string) {
		h := slotHolders(t, c, "api")
		n := 0
		for _, node := range h {
			if node == "" {
				n++
			}
		}
		return n, fmt.Sprint(h)
	}
	var lostNow int
	waitFor(t, 30*time.Second, "no slot held by a dead node, every one not taken over lost with a victim in status", func() (bool, string) {
		h := slotHolders(t, c, "api")
		for _, node := range h {
			if slices.Contains(victims, node) {
				return false, fmt.Sprint(h)
			}
		}
		// What users see: mariposa status says lost and names the node
		// (the slot key went with the session; its claimed key names the
		// holder, cluster.ReadState).
		out, err := exec.Command(mariposaBin, "status", "-json", "-consul-addr", cl.Servers[0].HTTPAddr()).Output()
		if err != nil {
			return false, err.Error()
		}
		var st command.StatusOutput
		if err := json.Unmarshal(out, &st); err != nil {
			return false, err.Error()
		}
		lostNow = 0
		for _, u := range st.Units {
			if u.Unit != "api" {
				continue
			}
			if len(u.Slots) != 5 {
				return false, fmt.Sprintf("%d slots in status", len(u.Slots))
			}
			for _, sl := range u.Slots {
				switch {
				case sl.State == "held":
				case sl.State == "lost" && slices.Contains(victims, sl.Node):
					lostNow++
				default:
					return false, fmt.Sprintf("%s %s on %q", sl.Slot, sl.State, sl.Node)
				}
			}
		}
		if n, s := free(); n != lostNow {
			return false, fmt.Sprintf("%d free in Consul, %d lost in status: %s", n, lostNow, s)
		}
		return true, ""
	})
	from := map[string]bool{}
	if p, _, err := c.KV().Get(cluster.TakeoversKey, nil); err == nil && p != nil {
		l, err := cluster.DecodeTakeoverLog(p.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Takeovers {
			from[e.From] = true
		}
	}
	if len(from) > 1 || lostNow == 0 {
		t.Fatalf("%d of the %d lost slots free once the brake engaged, taken over from %v; the budget allows one node's", lostNow, lost, from)
	}
	// Meanwhile a new unit is placed on the survivors: only takeovers of
	// lost slots are braked.
	deploy(t, cl.Servers[0], "-name", "web", spec("web", 2))
	waitFor(t, 30*time.Second, "web placed during the storm", func() (bool, string) {
		return passingCount(c, "web") == 2, fmt.Sprint(slotHolders(t, c, "web"))
	})
	// Longer than the budget's window: the budget alone would let the next
	// takeover through within it.
	consistently(t, cluster.TakeoverWindow+4*time.Second, "no takeover while the brake is engaged", func() (bool, string) {
		n, s := free()
		return n == lostNow, s
	})

	// Each survivor's liveness check says why it waits (the agent's own
	// view: output changes reach the catalog only every 5 minutes).
	for _, n := range names[3:] {
		ac := cl.Agent(n).Client(t).Agent()
		waitFor(t, 10*time.Second, n+"'s liveness check names the brake", func() (bool, string) {
			cs, err := ac.Checks()
			if err != nil {
				return false, err.Error()
			}
			for _, hc := range cs {
				if hc.ServiceName == "mariposa" {
					return strings.Contains(hc.Output, "lost with client-") &&
						strings.Contains(hc.Output, "takeovers paused by the storm brake (mariposa resume)"), hc.Output
				}
			}
			return false, "no liveness check"
		})
	}

	out, err := exec.Command(mariposaBin, "resume", "-consul-addr", cl.Servers[0].HTTPAddr()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "is lifted") {
		t.Fatalf("mariposa resume: %v\n%s", err, out)
	}
	// The lifted record names the vanished nodes down: a node that missed
	// the brake counts them gone already (website/cluster.md).
	if p, _, err := c.KV().Get(cluster.StormLiftedKey, nil); err != nil || p == nil {
		t.Fatalf("no %s after the resume: %v", cluster.StormLiftedKey, err)
	} else if l, err := cluster.DecodeStormLifted(p.Value); err != nil || l.Storm == nil || !isSubset(victims, l.Down) {
		t.Fatalf("%s %+v (%v): want the lifted record with %v down", cluster.StormLiftedKey, l, err, victims)
	}
	// The takeover budget still paces them: one lost node's slots per
	// TakeoverWindow (10s), and up to two lost nodes are left, each after
	// its lock delay and rank delays: 20-25s on an idle machine, so the
	// deadline leaves room for a loaded one.
	waitFor(t, 90*time.Second, "api back at count 5 on the survivors", func() (bool, string) {
		n, s := free()
		return n == 0 && passingCount(c, "api") >= 5, s
	})
	for k, n := range slotHolders(t, c, "api") {
		if slices.Contains(victims, n) {
			t.Errorf("slot %d held by dead node %s", k, n)
		}
	}
	if a := auditActions(t, c, "api"); a["claim"] != 5+lost {
		t.Errorf("api audit %v: want %d claims", a, 5+lost)
	}
	if r, _ := cluster.ReadStorm(c); r != nil {
		t.Errorf("the brake engaged again after resume: %+v", r)
	}
}

// passingCount is the number of passing instances of a service.
func passingCount(c *api.Client, name string) int {
	es, _, err := c.Health().Service(name, "", true, nil)
	if err != nil {
		return -1
	}
	return len(es)
}

// isSubset: every element of a is in b.
func isSubset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
