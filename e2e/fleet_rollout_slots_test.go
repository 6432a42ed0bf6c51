package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/semaphore"
)

// TestFleetRolloutSlotsOfOneNode: one node holds all three slots of a
// unit with max_parallel 2. Its slots take a rollout token each (keys
// <session>/<slot>): the tokens, sampled from the KV store every 50 ms,
// show the node's session holding two at once, never more than
// max_parallel, and the deploy ends with every instance on v2.
//
// Mutation check, run by hand: with the contender key named by the session
// alone (one per node, slots in turn), the node never holds two.
func TestFleetRolloutSlotsOfOneNode(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 1, Clients: 1})
	c := cl.Servers[0].Client(t)
	fleetOf(t, cl)
	spec := func(version string) string {
		return writeHCL(t, fmt.Sprintf(`
service "web" {
  command = ["sleep", "600"]
  version = %q
  env     = { V = %q }
  count   = 3
  max_per_node = 3
  check "ready" {
    args     = ["true"]
    interval = "500ms"
  }
  update {
    max_parallel     = 2
    min_healthy_time = "3s"
    healthy_deadline = "30s"
  }
}
`, version, version))
	}
	deploy := func(file string) {
		t.Helper()
		out, err := exec.Command(mariposaBin, "deploy", "-consul-addr", cl.Servers[0].HTTPAddr(), "-name", "web", "-wait", file).CombinedOutput()
		if err != nil {
			t.Fatalf("deploy -wait %s: %v\n%s", file, err, out)
		}
	}
	deploy(spec("v1"))

	var mu sync.Mutex
	mostPerSession, mostAll := 0, 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			pairs, _, err := c.KV().List(cluster.RolloutPrefix+"web/", nil)
			if err != nil {
				continue
			}
			per, all := map[string]int{}, 0
			for _, p := range pairs {
				if strings.Contains(p.Key, "/tokens/") && p.Session != "" && p.Flags == semaphore.FlagHolding {
					per[p.Session]++
					all++
				}
			}
			mu.Lock()
			for _, n := range per {
				mostPerSession = max(mostPerSession, n)
			}
			mostAll = max(mostAll, all)
			mu.Unlock()
		}
	}()
	deploy(spec("v2"))
	close(done)
	wg.Wait()
	if mostAll > 2 {
		t.Errorf("%d rollout tokens held at once, max_parallel 2", mostAll)
	}
	if mostPerSession < 2 {
		t.Errorf("the node held at most %d token at once: its slots were replaced one after the other", mostPerSession)
	}
	es, _, err := c.Health().Service("web", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Service.Meta["version"] != "v2" {
			t.Errorf("%s still on %s", e.Service.ID, e.Service.Meta["version"])
		}
	}
	if len(es) != 3 {
		t.Errorf("%d instances passing, want 3", len(es))
	}
}
