package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// BenchmarkFleetNodeLoss: a fleet of real client agents (10, or
// MARIPOSA_BENCH_NODES; each with its own mariposa -cluster) runs 10
// services of count 3 up to 10 (3..9 on 10 nodes: 54 slots; max_per_node 1,
// and full count stays reachable once the lost nodes are gone); a tenth of the nodes
// (at least one), those holding the most slots, are lost at once (kill -9
// of their agents and mariposas), for MARIPOSA_BENCH_ROUNDS rounds (default
// one) or until half are gone.
// Printed: per affected service, the time from the kill
// until it is back at full count on live nodes with every instance passing
// (p50, p99 over the services and rounds), the Raft log entries per vacancy
// from the kill until every new holder has said it is healthy (every write:
// claims, session invalidations, the catalog's registrations, the holders'
// statuses, coordinate updates), and over-runs: more children than count of any
// exclusive service at any sample (must be 0).
func BenchmarkFleetNodeLoss(b *testing.B) {
	// Consul's own gossip timing, and the harness's faster one (Serf marks
	// a dead node failed in 1-2 s instead of about 5 s).
	for _, gossip := range []string{"consul", "fast"} {
		b.Run("gossip="+gossip, func(b *testing.B) { fleetNodeLoss(b, gossip == "consul") })
	}
}

// benchFleetNodes is the fleet's size: MARIPOSA_BENCH_NODES, default 10
// (make bench-fleet NODES=n).
func benchFleetNodes(b *testing.B) int {
	n := 10
	if v := os.Getenv("MARIPOSA_BENCH_NODES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			b.Fatalf("MARIPOSA_BENCH_NODES=%q: want a number of nodes, at least 2", v)
		}
	}
	return n
}

func fleetNodeLoss(b *testing.B, consulGossip bool) {
	fleetNodes := benchFleetNodes(b)
	perRound := max(1, fleetNodes/10) // a tenth of the fleet at once
	rounds := min(max(b.N, benchRounds(b.N)), max(1, fleetNodes/2/perRound))
	// Counts from 3 up to 10, but no more than the nodes left after the
	// last round: max_per_node is 1, and full count must stay reachable.
	maxCount := max(3, min(10, fleetNodes-rounds*perRound))
	cl := consultest.NewFleet(b, consultest.FleetOptions{Servers: 3, Clients: fleetNodes, ConsulGossip: consulGossip,
		NodeMeta: func(i int) map[string]string { return map[string]string{"zone": "z" + strconv.Itoa(i%3)} },
		// The FSM's counters per command type, read from the leader.
		ExtraConfig: map[string]any{"telemetry": map[string]any{"prometheus_retention_time": "1h", "disable_hostname": true}}})
	c := cl.Servers[0].Client(b)
	ms := map[string]*mariposa{}
	for _, a := range cl.Clients {
		ms[a.Name] = startMariposa(b, a, nil, "-cluster", "-log-level", "warn")
	}
	waitFor(b, 60*time.Second, "every supervisor live", func() (bool, string) {
		return len(passingInstances(c, "mariposa")) == fleetNodes, ""
	})
	var hcl strings.Builder
	counts := map[string]int{}
	slotsTotal := 0
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("svc%d", i)
		counts[name] = 3 + i%(maxCount-2)
		slotsTotal += counts[name]
		fmt.Fprintf(&hcl, "service %q {\n  command = [%q]\n  env = { STAMP_SLEEP_MS = \"-1\" }\n  count = %d\n  exclusive = %v\n}\n",
			name, stampBin, counts[name], i%2 == 0)
	}
	deploy(b, cl.Servers[0], writeHCL(b, hcl.String()))

	full := func(dead map[string]bool) (map[string]bool, int) {
		done := map[string]bool{}
		over := 0
		for name, n := range counts {
			es, _, err := c.Health().Service(name, "", false, &api.QueryOptions{AllowStale: true})
			if err != nil {
				continue
			}
			passing, running := 0, 0
			for _, e := range es {
				if dead[e.Node.Node] {
					continue
				}
				running++
				if e.Checks.AggregatedStatus() == api.HealthPassing {
					passing++
				}
			}
			if running > n {
				over++
			}
			h := slotHoldersOf(c, name)
			ok := passing == n
			for k := 0; k < n; k++ {
				ok = ok && h[k] != "" && !dead[h[k]]
			}
			done[name] = ok
		}
		return done, over
	}
	waitFor(b, 120*time.Second, "every service at full count", func() (bool, string) {
		d, _ := full(nil)
		for _, ok := range d {
			if !ok {
				return false, fmt.Sprint(d)
			}
		}
		return true, ""
	})

	// The deployment done first: its holders' statuses and its records'
	// moves are its writes, not a vacancy's.
	waitFor(b, 120*time.Second, "the deployment successful, every holder healthy", func() (bool, string) {
		for name, n := range counts {
			p, _, err := c.KV().Get(cluster.RecordKey(name), &api.QueryOptions{AllowStale: true})
			if err != nil || p == nil {
				return false, fmt.Sprintf("%s: no record (%v)", name, err)
			}
			if r, err := cluster.DecodeUnitRecord(p.Value); err != nil || r.Status != cluster.DeploySuccessful {
				return false, fmt.Sprintf("%s: %s", name, p.Value)
			}
			for k := 0; k < n; k++ {
				if ok, why := saidHealthy(c, name, k); !ok {
					return false, why
				}
			}
		}
		return true, ""
	})
	var times []time.Duration
	var entries, vacancies, overRuns int
	byCommand := map[string]float64{} // the leader's FSM entries, summed over the rounds
	dead := map[string]bool{}
	var lastKill time.Time
	for i := 0; i < rounds && len(dead)+perRound <= fleetNodes/2; i++ {
		// Rounds are independent losses: the next one once the takeover
		// budget's window has moved past this one's takeovers (a wave of
		// losses closer together moves a tenth of the nodes' slots per
		// window, by design: cluster/storm.go).
		if !lastKill.IsZero() {
			time.Sleep(time.Until(lastKill.Add(cluster.TakeoverWindow + time.Second)))
		}
		// The victims: the live nodes holding the most slots.
		load := map[string]int{}
		for name := range counts {
			for _, n := range slotHoldersOf(c, name) {
				if n != "" && !dead[n] {
					load[n]++
				}
			}
		}
		byLoad := make([]string, 0, len(load))
		for n := range load {
			byLoad = append(byLoad, n)
		}
		sort.Slice(byLoad, func(i, j int) bool {
			if load[byLoad[i]] != load[byLoad[j]] {
				return load[byLoad[i]] > load[byLoad[j]]
			}
			return byLoad[i] < byLoad[j]
		})
		victims := byLoad[:min(perRound, len(byLoad))]
		most := 0
		for _, v := range victims {
			most += load[v]
		}
		affected := map[string]bool{}
		for name := range counts {
			for _, n := range slotHoldersOf(c, name) {
				if slices.Contains(victims, n) {
					affected[name] = true
				}
			}
		}
		idx0, met0 := raftIndex(b, cl), leaderMetrics(b, cl)
		t0 := time.Now()
		lastKill = t0
		for _, victim := range victims {
			_ = ms[victim].cmd.Process.Signal(syscall.SIGKILL)
			cl.Agent(victim).Kill()
			dead[victim] = true
		}
		got := map[string]time.Duration{}
		deadline := time.Now().Add(60 * time.Second)
		for len(got) < len(affected) && time.Now().Before(deadline) {
			d, over := full(dead)
			overRuns += over
			for name := range affected {
				if _, seen := got[name]; !seen && d[name] {
					got[name] = time.Since(t0)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(got) < len(affected) {
			b.Fatalf("round %d: only %d of %d services back at full count within 60s", i, len(got), len(affected))
		}
		// A vacancy's cost in all: the window ends once every new holder
		// has said it is healthy (its status, a transaction of its own,
		// min_healthy_time after its instance passes), so that no round's
		// count holds the statuses of the round before.
		waitFor(b, 60*time.Second, "every holder of the affected services said it is healthy", func() (bool, string) {
			for name := range affected {
				for k := 0; k < counts[name]; k++ {
					if ok, why := saidHealthy(c, name, k); !ok {
						return false, why
					}
				}
			}
			return true, ""
		})
		entries += int(raftIndex(b, cl) - idx0)
		from := fsmCounts(met0)
		for k, v := range fsmCounts(leaderMetrics(b, cl)) {
			byCommand[k] += v - from[k]
		}
		vacancies += most
		for _, d := range got {
			times = append(times, d)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	p := func(q float64) time.Duration { return times[min(len(times)-1, int(q*float64(len(times))))] }
	fmt.Printf("fleet of %d real nodes (Consul gossip timing: %v), 10 services (%d slots), %d node(s) lost at once per round, %d rounds: back at full count p50=%.1fs p99=%.1fs max=%.1fs; %.1f Raft entries per vacancy (%d vacancies); over-runs %d\n",
		fleetNodes, consulGossip, slotsTotal, perRound, len(dead)/perRound, p(0.5).Seconds(), p(0.99).Seconds(), times[len(times)-1].Seconds(),
		float64(entries)/float64(max(vacancies, 1)), vacancies, overRuns)
	fmt.Printf("  Raft entries by command (leader's FSM), per vacancy: %s\n", perInstance(byCommand, max(vacancies, 1)))
	b.ReportMetric(p(0.5).Seconds(), "p50-s")
	b.ReportMetric(p(0.99).Seconds(), "p99-s")
	b.ReportMetric(float64(overRuns), "over-runs")
	b.ReportMetric(0, "ns/op")
}

// saidHealthy: slot k of unit is held and its holder's status says it is
// healthy in this hold (the status's index is the slot key's).
func saidHealthy(c *api.Client, unit string, k int) (bool, string) {
	q := &api.QueryOptions{AllowStale: true}
	sp, _, err := c.KV().Get(cluster.SlotKey(unit, k), q)
	if err != nil || sp == nil || sp.Session == "" {
		return false, fmt.Sprintf("%s/%d not held (%v)", unit, k, err)
	}
	st, _, err := c.KV().Get(cluster.UnitStatusKey(unit, k), q)
	if err != nil || st == nil {
		return false, fmt.Sprintf("%s/%d: no status (%v)", unit, k, err)
	}
	var hs cluster.HoldStatus
	if err := json.Unmarshal(st.Value, &hs); err != nil || hs.HealthyAt == nil || hs.Index != sp.ModifyIndex {
		return false, fmt.Sprintf("%s/%d: status %s for hold %d", unit, k, st.Value, sp.ModifyIndex)
	}
	return true, ""
}

// slotHoldersOf is slotHolders without a test, read stale: empty when
// the read fails.
func slotHoldersOf(c *api.Client, unit string) map[int]string {
	h, err := holdersOf(c, unit, &api.QueryOptions{AllowStale: true})
	if err != nil {
		return map[int]string{}
	}
	return h
}

// raftIndex is the Raft leader's last log index.
func raftIndex(b testing.TB, cl *consultest.Cluster) uint64 {
	var best uint64
	for _, s := range cl.Servers {
		self, err := s.Client(b).Agent().Self()
		if err != nil {
			continue
		}
		stats, _ := self["Stats"]["raft"].(map[string]any)
		v, _ := strconv.ParseUint(fmt.Sprint(stats["last_log_index"]), 10, 64)
		best = max(best, v)
	}
	return best
}

// BenchmarkFleetSteadyState: what a node holding 10 slots costs Consul
// when nothing happens: its requests per minute (through a counting proxy)
// and, of them, the consistent confirmation reads per second; the slots
// are exclusive (confirmed) or not.
func BenchmarkFleetSteadyState(b *testing.B) {
	for _, exclusive := range []bool{false, true} {
		b.Run(fmt.Sprintf("exclusive=%v", exclusive), func(b *testing.B) {
			agent := consultest.NewDev(b)
			c := agent.Client(b)
			proxy := newCountingProxy(b, agent.HTTPAddr())
			var hcl strings.Builder
			for i := 0; i < 10; i++ {
				fmt.Fprintf(&hcl, "service \"s%d\" {\n  command = [%q]\n  env = { STAMP_SLEEP_MS = \"-1\" }\n  count = 1\n  exclusive = %v\n}\n", i, stampBin, exclusive)
			}
			for i := 0; i < b.N; i++ {
				m := startMariposaAt(b, proxy.addr, "-cluster")
				// deploy refuses a fleet with no live node (nothing would
				// run): wait for this one's registration first.
				waitFor(b, 60*time.Second, "the node live in the fleet", func() (bool, string) {
					n := len(passingInstances(c, "mariposa"))
					return n == 1, fmt.Sprint(n)
				})
				deploy(b, agent, writeHCL(b, hcl.String()))
				waitFor(b, 60*time.Second, "10 slots held and passing", func() (bool, string) {
					n := 0
					for j := 0; j < 10; j++ {
						if len(passingInstances(c, fmt.Sprintf("s%d", j))) == 1 {
							n++
						}
					}
					return n == 10, fmt.Sprint(n)
				})
				// Pacing, not waiting: let the start's requests pass, then
				// count the idle requests over one minute.
				time.Sleep(3 * time.Second)
				r0, t0 := proxy.n.Load(), time.Now()
				time.Sleep(60 * time.Second)
				reqs := float64(proxy.n.Load()-r0) / time.Since(t0).Minutes()
				fmt.Printf("one node holding 10 %s slots, idle: %.0f Consul requests/min (%.1f/s)\n",
					map[bool]string{true: "exclusive", false: "non-exclusive"}[exclusive], reqs, reqs/60)
				b.ReportMetric(reqs, "requests/min")
				b.ReportMetric(0, "ns/op")
				m.stop(b, syscall.SIGTERM, time.Minute)
			}
		})
	}
}
