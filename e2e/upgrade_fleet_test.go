package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestFleetRollingUpgrade: a fleet of three nodes runs an exclusive unit
// with count = 2; each node's mariposa is upgraded in place in turn (a
// while with mixed versions) while a sampler watches: the count is held
// throughout (two children running, never more: no over-run), every
// slot's key keeps its session and lock index (nothing moves, nothing is
// claimed again), and no child restarts.
func TestFleetRollingUpgrade(t *testing.T) {
	consultest.SkipShort(t, "a real fleet in -short mode")
	cl := consultest.NewCluster(t, 1, 3)
	c := cl.Servers[0].Client(t)
	dir := t.TempDir()
	ms := map[string]*mariposa{}
	bins := map[string]string{}
	for _, a := range cl.Clients {
		bins[a.Name] = filepath.Join(t.TempDir(), "mariposa")
		install(t, mariposaBin, bins[a.Name])
		ms[a.Name] = startMariposaBin(t, bins[a.Name], a, nil, "-cluster")
	}
	waitFor(t, 60*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == len(cl.Clients), fmt.Sprint(len(live))
	})
	type nodeSlot struct {
		node string
		slot int
	}
	watches := map[nodeSlot]*childWatch{}
	for _, a := range cl.Clients {
		for k := 0; k < 2; k++ {
			watches[nodeSlot{a.Name, k}] = watchChildren(t, filepath.Join(dir, fmt.Sprintf("%s.%d.stamps", a.Name, k)))
		}
	}
	deploy(t, cl.Servers[0], writeHCL(t, fmt.Sprintf(`
service "api" {
  command   = ["/bin/sh", "-c", "exec %s -stamp-file %s/$MARIPOSA_NODE.$MARIPOSA_INSTANCE.stamps"]
  count     = 2
  exclusive = true
}
`, childBin, dir)))
	running := func() map[nodeSlot][]int {
		out := map[nodeSlot][]int{}
		for ns, w := range watches {
			if r := w.running(); len(r) > 0 {
				out[ns] = r
			}
		}
		return out
	}
	var before map[nodeSlot][]int
	waitFor(t, 60*time.Second, "two slots held, one child each", func() (bool, string) {
		before = running()
		h := slotHolders(t, c, "api")
		return len(before) == 2 && h[0] != "" && h[1] != "" && len(before[nodeSlot{h[0], 0}]) == 1 && len(before[nodeSlot{h[1], 1}]) == 1,
			fmt.Sprintf("holders %v, children %v", h, before)
	})
	keys := map[int][2]uint64{} // slot -> its key's lock index and modify index
	sessions := map[int]string{}
	for k := 0; k < 2; k++ {
		p, _, err := c.KV().Get(cluster.SlotKey("api", k), nil)
		if err != nil || p == nil || p.Session == "" {
			t.Fatalf("slot %d: %+v %v", k, p, err)
		}
		keys[k], sessions[k] = [2]uint64{p.LockIndex, p.ModifyIndex}, p.Session
	}

	var mu sync.Mutex
	var violations []string
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			bad := func(f string, a ...any) {
				mu.Lock()
				if len(violations) < 20 {
					violations = append(violations, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(f, a...))
				}
				mu.Unlock()
			}
			if r := running(); fmt.Sprint(r) != fmt.Sprint(before) {
				bad("children %v, were %v", r, before)
			}
			for k := 0; k < 2; k++ {
				p, _, err := c.KV().Get(cluster.SlotKey("api", k), nil)
				switch {
				case err != nil:
					bad("slot %d: %v", k, err)
				case p == nil || p.Session != sessions[k] || p.LockIndex != keys[k][0]:
					bad("slot %d changed hands: %+v", k, p)
				}
			}
		}
	}()
	quiet := func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(violations) == 0, strings.Join(violations, "\n")
	}
	began := time.Now()
	for _, a := range cl.Clients {
		install(t, rebuiltMariposa(t), bins[a.Name])
		out, code := ms[a.Name].cli(t, "upgrade")
		if code != 0 {
			t.Fatalf("%s: mariposa upgrade: exit %d\n%s", a.Name, code, out)
		}
		t.Logf("%s: %s", a.Name, strings.TrimSpace(out))
		// Mixed versions for a while, under the sampler.
		consistently(t, 2*time.Second, "mixed versions", quiet)
	}
	// Past the fleet's stray grace (3 s) and a few reconciles.
	consistently(t, 5*time.Second, "every node upgraded", quiet)
	close(stop)
	<-done
	if len(violations) > 0 {
		t.Fatalf("the rolling upgrade was seen:\n%s", strings.Join(violations, "\n"))
	}
	for ns, w := range watches {
		if n := len(w.intervals(t)); n > 1 || (n == 1) != (len(before[ns]) == 1) {
			t.Errorf("%s slot %d: %d children over the test", ns.node, ns.slot, n)
		}
	}
	for name, m := range ms {
		if m.exited() {
			t.Errorf("%s: mariposa exited", name)
		}
		// Each node's audit file since the first upgrade: the slot
		// instance it runs adopted, and nothing else.
		adopted := 0
		for _, e := range auditSince(t, filepath.Join(filepath.Dir(m.sock), "audit.jsonl"), began) {
			if e.Kind != "adopted" || e.Service != "api" {
				t.Errorf("%s: audit record after the upgrade: %+v", name, e)
			}
			adopted++
		}
		holds := 0
		for ns := range before {
			if ns.node == name {
				holds++
			}
		}
		if adopted != holds {
			t.Errorf("%s: %d adopted records, holds %d slots", name, adopted, holds)
		}
	}
}
