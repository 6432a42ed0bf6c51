package e2e

import (
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// TestFleetRolloutSlotsOfOneNode: one node holds all three slots of a
// unit with max_parallel 2. website/reference/update.md promises that a
// node replaces as many of its slots at once as tokens are free, and that
// a unit never runs more than count instances nor has more than
// max_parallel of them being replaced. Sampled every 50 ms:
//
//   - the catalog (what a user sees): never more than 3 instances of web,
//     never more than 2 not passing; and at one moment two of the node's
//     instances are being replaced together (at most one left on v1 while
//     no v2 instance has yet passed for a second; replaced one after the
//     other, the first v2 instance passes for min_healthy_time, 3 s,
//     before the second v1 one stops);
//   - the step machine's rollout tokens (units/<unit>/tokens/<t>, locked
//     by the holder's session): the node's session holds two at once,
//     never more than max_parallel in all;
//
// and the deploy ends with every instance on v2.
//
// Mutation check, run by hand on an older engine (since removed): with its
// semaphore's contender key named by the session alone (one per node,
// slots in turn), the node never held two, and the catalog never showed
// two replaced together.
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
	mostInstances, mostDown, together := 0, 0, false
	passingSince := map[string]time.Time{} // v2 instances, as this sampler first saw them passing
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
			now := time.Now()
			per, all := map[string]int{}, 0
			tokens := func(prefix string, holding func(*api.KVPair) bool) bool {
				pairs, _, err := c.KV().List(prefix, nil)
				if err != nil {
					return false
				}
				for _, p := range pairs {
					if holding(p) {
						per[p.Session]++
						all++
					}
				}
				return true
			}
			okA := tokens(cluster.UnitDeployPrefix("web")+"tokens/", func(p *api.KVPair) bool { return p.Session != "" })
			es, _, err := c.Health().Service("web", "", false, nil)
			mu.Lock()
			if okA {
				for _, n := range per {
					mostPerSession = max(mostPerSession, n)
				}
				mostAll = max(mostAll, all)
			}
			if err == nil {
				v1, down, settled := 0, 0, 0
				for _, e := range es {
					passing := e.Checks.AggregatedStatus() == api.HealthPassing
					if !passing {
						down++
					}
					switch e.Service.Meta["version"] {
					case "v1":
						v1++
						delete(passingSince, e.Service.ID)
					case "v2":
						if !passing {
							delete(passingSince, e.Service.ID)
						} else if since, ok := passingSince[e.Service.ID]; !ok {
							passingSince[e.Service.ID] = now
						} else if now.Sub(since) >= time.Second {
							settled++
						}
					}
				}
				mostInstances, mostDown = max(mostInstances, len(es)), max(mostDown, down)
				together = together || (len(es) > 0 && v1 <= 1 && settled == 0)
			}
			mu.Unlock()
		}
	}()
	deploy(spec("v2"))
	close(done)
	wg.Wait()
	if mostInstances > 3 || mostDown > 2 {
		t.Errorf("the catalog showed %d instances of web at once (count 3), %d not passing (max_parallel 2)", mostInstances, mostDown)
	}
	if !together {
		t.Errorf("the catalog never showed two instances replaced together: the node's slots were replaced one after the other")
	}
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
