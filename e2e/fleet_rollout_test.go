package e2e

import (
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A rolling update on a real fleet (3 servers, 5 clients): count 4 with
// max_parallel 2. Sampled every 100 ms from the catalog for the whole
// rollout: never more than 4 instances, never fewer than 2 passing; it
// ends with every instance at the new version (mariposa status -verify).
// Then a version whose check fails: the first max_parallel instances are
// not healthy within healthy_deadline, the rollout is marked failed with
// its audit record, and the other two instances stay on the old version,
// passing, untouched.
func TestFleetRollingUpdate(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 3, Clients: 5})
	c := cl.Servers[0].Client(t)
	fleetOf(t, cl)
	spec := func(version, check string) string {
		return writeHCL(t, fmt.Sprintf(`
service "web" {
  command = ["sleep", "600"]
  version = %q
  env     = { V = %q }
  count   = 4
  check "ready" {
    args     = ["sh", "-c", %q]
    interval = "500ms"
  }
  update {
    max_parallel     = 2
    min_healthy_time = "2s"
    healthy_deadline = "15s"
  }
}
`, version, version, check))
	}
	type sample struct{ total, passing int }
	versions := func() map[string][]string { // version -> passing nodes
		out := map[string][]string{}
		es, _, _ := c.Health().Service("web", "", true, nil)
		for _, e := range es {
			out[e.Service.Meta["version"]] = append(out[e.Service.Meta["version"]], e.Node.Node)
		}
		return out
	}
	var mu sync.Mutex
	var worst []sample
	sampling := func() (stop func()) {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				all, _, err1 := c.Health().Service("web", "", false, nil)
				pass, _, err2 := c.Health().Service("web", "", true, nil)
				if err1 != nil || err2 != nil {
					continue
				}
				s := sample{len(all), len(pass)}
				if s.total > 4 || s.passing < 2 {
					mu.Lock()
					worst = append(worst, s)
					mu.Unlock()
				}
			}
		}()
		return func() { close(done); wg.Wait() }
	}

	deploy(t, cl.Servers[0], "-name", "web", spec("v1", "exit 0"))
	waitFor(t, 60*time.Second, "4 passing instances at v1", func() (bool, string) {
		v := versions()
		return len(v["v1"]) == 4, fmt.Sprint(v)
	})

	stop := sampling()
	deploy(t, cl.Servers[0], "-name", "web", spec("v2", "exit 0"))
	out, err := exec.Command(mariposaBin, "status", "-consul-addr", cl.Servers[0].HTTPAddr(),
		"-wait", "90s", "-verify", "v2").CombinedOutput()
	stop()
	if err != nil {
		t.Fatalf("status -verify v2: %v\n%s", err, out)
	}
	if len(worst) > 0 {
		t.Errorf("during the rollout to v2 (max_parallel 2 of 4), samples out of bounds (total > 4 or passing < 2): %v", worst)
	}

	// A bad version: its check fails.
	deploy(t, cl.Servers[0], "-name", "web", spec("v3", "exit 2"))
	waitFor(t, 60*time.Second, "the rollout to v3 marked failed", func() (bool, string) {
		pairs, _, err := c.KV().List(cluster.RolloutPrefix+"web/", nil)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pairs {
			if len(p.Key) > 7 && p.Key[len(p.Key)-7:] == "/failed" {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(pairs), " keys")
	})
	consistently(t, 5*time.Second, "two instances still on v2, passing; none of v3 passing", func() (bool, string) {
		v := versions()
		all, _, _ := c.Health().Service("web", "", false, nil)
		v3 := 0
		for _, e := range all {
			if e.Service.Meta["version"] == "v3" {
				v3++
			}
		}
		return len(v["v2"]) == 2 && len(v["v3"]) == 0 && v3 == 2, fmt.Sprintf("passing %v; %d at v3", v, v3)
	})
	if n := auditActions(t, c, "web")["rollout-failed"]; n < 1 {
		t.Errorf("%d rollout-failed audit records", n)
	}
}
