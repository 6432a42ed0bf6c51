package executor_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/executor"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// The executor's Stats, on real Consul, say what is held: settled on a
// unit of count 2 over 3 nodes, every node is Ready, sees 3 live nodes
// and the unit's 2 slots held, none free; the slots Mine across the nodes
// are exactly the slot keys' holders, with the keys' ModifyIndex as their
// fencing token. Config.OnClaim is told each claim (2), with how long the
// slot was vacant. Waiting is empty at rest, and names the slot while a
// lost hold's lock delay runs. Mutation checks: without the loop's
// publishState the stats stay the zero snapshot (fails); without
// claimed's call of OnClaim, no claims are told (fails).
func TestStatsMatchHeld(t *testing.T) {
	var mu sync.Mutex
	claims := map[string][]time.Duration{}
	f := newFleet(t, fleetOptions{nodes: 3, config: func(i int, c *executor.Config) {
		c.OnClaim = func(unit string, vacant time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			claims[unit] = append(claims[unit], vacant)
		}
	}}, web)
	f.waitSettled(30 * time.Second)
	keys, err := f.slotKeys("web")
	if err != nil {
		t.Fatal(err)
	}
	holders := map[int]string{}
	for k, p := range keys {
		n, err := f.nodeOf(p.Session)
		if err != nil {
			t.Fatal(err)
		}
		holders[k] = n
	}
	check := func() string {
		mine := map[int]string{}
		for _, n := range f.nodes {
			st := n.ex.Stats()
			if !st.Ready || st.Node != n.name || st.LiveNodes != 3 || len(st.Units) != 1 {
				return "not ready: " + n.name
			}
			u := st.Units[0]
			if u.Unit != "web" || u.Desired != 2 || u.Held != 2 || u.Free != 0 || u.Failed != 0 || len(u.Slots) != 2 {
				return "counts of " + n.name
			}
			for _, s := range u.Slots {
				if s.State != cluster.SlotStatHeld || s.Node != holders[s.K] {
					return "slot state on " + n.name
				}
				if s.Mine {
					if s.TermIndex != keys[s.K].ModifyIndex {
						return "fencing token on " + n.name
					}
					mine[s.K] = n.name
				}
			}
			if w := n.ex.Waiting(); w != "" {
				return n.name + " waits: " + w
			}
		}
		if len(mine) != 2 || mine[0] != holders[0] || mine[1] != holders[1] {
			return "mine across the nodes"
		}
		return ""
	}
	var why string
	if !consultest.WaitFor(10*time.Second, func() bool { why = check(); return why == "" }) {
		t.Fatalf("stats do not match what is held: %s; %+v", why, f.nodes[0].ex.Stats())
	}
	mu.Lock()
	got := append([]time.Duration(nil), claims["web"]...)
	mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("OnClaim told %v, want the 2 claims", claims)
	}
	for _, d := range got {
		if d < 0 || d > 30*time.Second {
			t.Fatalf("vacant %v", d)
		}
	}
	// A lost hold: the others wait out the lock delay, and say so.
	if _, err := f.c.Session().Destroy(keys[0].Session, nil); err != nil {
		t.Fatal(err)
	}
	var line string
	if !consultest.WaitFor(20*time.Second, func() bool {
		for _, n := range f.nodes {
			if n.name == holders[0] {
				continue
			}
			if w := n.ex.Waiting(); strings.Contains(w, "slot web/0 ") {
				line = w
				return true
			}
		}
		return false
	}) {
		t.Fatal("no node says it waits for web/0")
	}
	t.Logf("waiting: %s", line)
	f.waitSettled(30 * time.Second)
	mu.Lock()
	n := len(claims["web"])
	mu.Unlock()
	if n != 3 {
		t.Fatalf("OnClaim told %d claims, want 3", n)
	}
}
