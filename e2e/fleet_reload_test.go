package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/coord"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/report"
)

// Coordinated template reloads on a real fleet (3 servers, 5 clients):
// count 6 (two instances on one node, which share its session), a template
// of a KV key with change_mode restart and coordinate { max_parallel = 2 },
// and a check that fails for 1.5 s after each start (the child "starts
// up"). After one KV write, every instance must restart onto the new
// content, but never more than two at once: the catalog, sampled every
// 50 ms from the write until every instance is back, never shows more than
// two instances not passing. At the end every instance restarted exactly
// once, read the new content, and passes; every reload token is back.
//
// Mutation check: with the gate bypassed (ReloadGate left out of the
// runner's options in command/run.go, so coordinated reloads act at once)
// this test fails: the six restart together and the sampler sees six not
// passing (checked by hand when the test was written).
func TestFleetCoordinatedReload(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewFleet(t, consultest.FleetOptions{Servers: 3, Clients: 5})
	c := cl.Servers[0].Client(t)
	if _, err := c.KV().Put(&api.KVPair{Key: "reload/greeting", Value: []byte("v1")}, nil); err != nil {
		t.Fatal(err)
	}
	// Every node of this fleet is on this machine: the instances share
	// dir, and the rendered file (each node's template still sees its own
	// output change). Each run says what it read, and its PID, under its
	// service ID (web-<slot>).
	dir := t.TempDir()
	child := filepath.Join(dir, "child.sh")
	script := `#!/bin/sh
d=` + dir + `
id=$MARIPOSA_SERVICE_ID
rm -f "$d/ready.$id"
trap 'rm -f "$d/ready.$id"; exit 0' TERM INT
cp "$d/web.conf" "$d/seen.$id.$$"
echo $$ >> "$d/pids.$id"
sleep 1.5 & wait $!
touch "$d/ready.$id"
while :; do sleep 1 & wait $!; done
`
	if err := os.WriteFile(child, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := writeHCL(t, fmt.Sprintf(`
service "web" {
  command      = [%q]
  count        = 6
  max_per_node = 2

  template {
    contents    = "greeting={{ key \"reload/greeting\" }}\n"
    destination = %q
    change_mode = "restart"
    coordinate {
      max_parallel = 2
    }
  }

  check "ready" {
    args     = ["sh", "-c", "test -f %s/ready.$MARIPOSA_SERVICE_ID"]
    interval = "250ms"
  }

  stop {
    timeout = "2s"
  }
}
`, child, filepath.Join(dir, "web.conf"), dir))

	fleetOf(t, cl)
	deploy(t, cl.Servers[0], "-name", "web", spec)
	type inst struct {
		id, node string
		pid      int
		restarts int
		lastExit string
		passing  bool
	}
	instances := func() map[string]inst {
		out := map[string]inst{}
		es, _, err := c.Health().Service("web", "", false, nil)
		if err != nil {
			return nil
		}
		for _, e := range es {
			i := inst{id: e.Service.ID, node: e.Node.Node, passing: e.Checks.AggregatedStatus() == api.HealthPassing}
			if sc := checkByID(e, e.Service.ID+":mariposa"); sc != nil {
				if r, ok := report.Decode(sc.Output); ok {
					i.pid, i.restarts, i.lastExit = r.PID, r.Restarts, r.LastExit
				}
			}
			out[i.id] = i
		}
		return out
	}
	var before map[string]inst
	waitFor(t, 90*time.Second, "6 instances passing", func() (bool, string) {
		before = instances()
		n := 0
		for _, i := range before {
			if i.passing && i.pid != 0 {
				n++
			}
		}
		return n == 6 && len(before) == 6, fmt.Sprint(before)
	})
	nodes := map[string]int{}
	for _, i := range before {
		nodes[i.node]++
	}
	t.Logf("placed: %v", nodes)

	// The sampler: how many instances are not passing at once.
	var (
		mu      sync.Mutex
		worst   int
		bad     []string // samples above the bound
		seenBad = map[string]bool{}
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond): // the sampler's pacing
			}
			es, _, err := c.Health().Service("web", "", false, nil)
			if err != nil {
				continue
			}
			var down []string
			for _, e := range es {
				if e.Checks.AggregatedStatus() != api.HealthPassing {
					down = append(down, e.Service.ID)
				}
			}
			sort.Strings(down)
			mu.Lock()
			worst = max(worst, len(down))
			for _, id := range down {
				seenBad[id] = true
			}
			if len(down) > 2 {
				bad = append(bad, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), down))
			}
			mu.Unlock()
		}
	}()
	stopSampling := func() {
		select {
		case <-done:
		default:
			close(done)
			wg.Wait()
		}
	}
	defer stopSampling()

	start := time.Now()
	if _, err := c.KV().Put(&api.KVPair{Key: "reload/greeting", Value: []byte("v2")}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, "every instance restarted onto v2 and passing", func() (bool, string) {
		now := instances()
		var waiting []string
		for id, b := range before {
			i, ok := now[id]
			if !ok || !i.passing || i.pid == 0 || i.pid == b.pid {
				waiting = append(waiting, id)
				continue
			}
			seen, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("seen.%s.%d", id, i.pid)))
			if err != nil || string(seen) != "greeting=v2\n" {
				waiting = append(waiting, id+" (read "+strings.TrimSpace(string(seen))+")")
			}
		}
		sort.Strings(waiting)
		return len(waiting) == 0, fmt.Sprint("not yet: ", waiting)
	})
	// Every token is back (the last one out removes the semaphore's lock).
	// The sampler runs until then: an instance whose new process was just
	// started can still show the passing status its old process left (the
	// ready check has not run yet), so the wait above can end before the
	// last instances' start-up windows; mariposa gives a token back only
	// once the checks pass about the new process.
	waitFor(t, 30*time.Second, "every reload token given back", func() (bool, string) {
		pairs, _, err := c.KV().List(coord.RolloutPrefix+"web/reload/", &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pairs {
			if strings.HasSuffix(p.Key, "/.lock") {
				var l struct{ Holders map[string]bool }
				if json.Unmarshal(p.Value, &l) == nil && len(l.Holders) > 0 {
					return false, fmt.Sprintf("%s holders %v", p.Key, l.Holders)
				}
			}
		}
		return true, ""
	})
	took := time.Since(start)
	stopSampling()

	t.Logf("every instance reloaded in %s; at most %d not passing at once; seen not passing: %d", took.Round(time.Millisecond), worst, len(seenBad))
	if len(bad) > 0 {
		t.Errorf("more than max_parallel (2) instances not passing at once: %v", bad)
	}
	if len(seenBad) != 6 {
		t.Errorf("the sampler saw %d instances restarting, want all 6 (is the check's start-up window visible?)", len(seenBad))
	}
	for id, i := range instances() {
		if i.restarts != before[id].restarts+1 || !strings.Contains(i.lastExit, "template") {
			t.Errorf("%s: %d restarts (was %d), last after %q: want one, for the template", id, i.restarts, before[id].restarts, i.lastExit)
		}
	}
}
