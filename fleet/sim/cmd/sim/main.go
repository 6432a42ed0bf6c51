// Command sim runs the fleet's simulator (make sim) and prints, as its last
// line: sim: <N> nodes, <S> seeds, <V> violations, full count p50 <x> s p99
// <y> s after losing 10%, <w> txns/vacancy, <b> KB served/slot change.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/sim"
)

func main() {
	nodes := flag.Int("nodes", 50, "simulated nodes")
	seeds := flag.Int("seeds", 20, "seeds to run")
	first := flag.Uint64("seed", 1, "first seed")
	units := flag.Int("units", 0, "units (default nodes/10, at least 10)")
	slots := flag.Int("slots", 0, "slots per unit (default 100, at most nodes)")
	chaos := flag.Bool("chaos", true, "mariposa kills, a cut-off node and lost answers besides the loss")
	trace := flag.Bool("trace", false, "print the trace of each seed")
	memprofile := flag.String("memprofile", "", "write a heap profile here at the end")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	deploys := flag.Bool("deploys", false, "an operator's deploys from the seed: rolling, canary + promote, a bad version auto-reverted, a deploy racing the judge")
	settle := flag.Duration("settle", 0, "how long after the loss the run goes on (default 60s)")
	ops := flag.Bool("ops", false, "operator actions (pause, resume, drain) and the takeover budget; 30% of the nodes lost")
	storm := flag.Bool("storm", false, "the storm brake's scenario: 60% of the nodes lost, resumed 20 s later")
	volumes := flag.Bool("volumes", false, "a volume that moves with the slots on every exclusive unit: handoffs and restores, and their invariants")
	buckets := flag.Int("buckets", 0, "bytes as the executor's bucketed watches serve them (fleet/executor's Config.Buckets; 0: a unit's watches of its own)")
	placement := flag.Bool("placement", false, "a constraint on the nodes' meta on some units, resources that some nodes have no room for on others, and the invariant that no instance starts where they exclude it")
	flag.Parse()
	// The simulation allocates fast and keeps little: collecting at four
	// times the live heap, not twice, saves a fifth of the CPU at 1,000
	// nodes for about 2 GB more a seed. GOGC, when set, decides.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(300)
	}
	u := *units
	if u == 0 {
		u = max(10, *nodes/10)
	}
	sl := *slots
	if sl == 0 {
		sl = min(100, *nodes/2)
	}
	if *cpuprofile != "" {
		if f, err := os.Create(*cpuprofile); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	start := time.Now()
	results := make([]sim.Result, *seeds)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := range *seeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cfg := sim.Config{Seed: *first + uint64(i), Nodes: *nodes, Units: u, SlotsPerUnit: sl, ExclusiveEvery: 2, Chaos: *chaos, Settle: *settle, Deploys: *deploys, Ops: *ops, Storm: *storm, Volumes: *volumes, Buckets: *buckets, Placement: *placement}
			if *trace {
				cfg.Trace = func(l string) { fmt.Println(l) }
			}
			results[i] = sim.Run(cfg)
		}()
	}
	wg.Wait()
	if *memprofile != "" {
		f, err := os.Create(*memprofile)
		if err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	var all []time.Duration
	var violations int
	var txns, vac, changes, bytes, raft, steps, ib, hb, ia, ha, rankings uint64
	var stepTime time.Duration
	var deps sim.DeployStats
	var vols sim.VolumeStats
	replayFlags := ""
	if *volumes {
		replayFlags = " -volumes"
	}
	for _, r := range results {
		for _, v := range r.Violations {
			if *deploys {
				fmt.Fprintf(os.Stderr, "%s (replay: go run ./fleet/sim/cmd/sim -nodes %d -units %d -slots %d -seeds 1 -seed %d -deploys%s)\n", v, *nodes, u, sl, r.Seed, replayFlags)
				continue
			}
			if *volumes {
				fmt.Fprintf(os.Stderr, "%s (replay: go run ./fleet/sim/cmd/sim -nodes %d -units %d -slots %d -seeds 1 -seed %d -volumes)\n", v, *nodes, u, sl, r.Seed)
				continue
			}
			fmt.Fprintf(os.Stderr, "%s (replay: make sim NODES=%d SEEDS=1 SEED=%d)\n", v, *nodes, r.Seed)
		}
		vols.Add(r.Volumes)
		deps.Reverts += r.Deploys.Reverts
		deps.Promotes += r.Deploys.Promotes
		deps.Updates += r.Deploys.Updates
		deps.Statuses += r.Deploys.Statuses
		deps.Idle += r.Deploys.Idle
		deps.Longest = max(deps.Longest, r.Deploys.Longest)
		for k, n := range r.Deploys.Outcomes {
			if deps.Outcomes == nil {
				deps.Outcomes = map[string]int{}
			}
			deps.Outcomes[k] += n
		}
		violations += len(r.Violations)
		all = append(all, r.Recovery...)
		txns += r.Txns
		raft += r.RaftWrites
		vac += uint64(r.Vacancies)
		changes += r.SlotChanges
		bytes += r.BytesServed
		rankings += r.Rankings
		ib += r.IndexBytes
		hb += r.HealthBytes
		ia += r.IndexAnswers
		ha += r.HealthAnswers
		steps += r.Steps
		stepTime += r.StepTime
		fmt.Printf("seed %d: trace %s, %d vacancies, full count p50 %.1f s p99 %.1f s, %d txns, %d raft writes, %d events\n",
			r.Seed, r.Trace, r.Vacancies, r.Percentile(0.5).Seconds(), r.Percentile(0.99).Seconds(), r.Txns, r.RaftWrites, r.Events)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))].Seconds()
	}
	fmt.Printf("simulated: %d units x %d slots; %d agent steps, %.1f us each (wall, rankings shared); %d rankings; raft writes/vacancy %.2f; ran %.1f s\n",
		u, sl, steps, float64(stepTime.Microseconds())/float64(max(1, steps)), rankings, float64(raft)/float64(max(1, vac)), time.Since(start).Seconds())
	if *deploys {
		fmt.Printf("deployments: %d successful, %d failed (%d auto-reverted), %d cancelled, %d never ended; %d canary phases promoted; %d instances updated in place; longest %.1f s; %d statuses written (%d healthy with no deployment running, %.2f/vacancy)\n",
			deps.Outcomes["successful"], deps.Outcomes["failed"], deps.Reverts, deps.Outcomes["cancelled"], deps.Outcomes["running"], deps.Promotes, deps.Updates, deps.Longest.Seconds(),
			deps.Statuses, deps.Idle, float64(deps.Idle)/float64(max(1, vac)))
	}
	if *volumes {
		fmt.Printf("volumes: %s\n", vols)
	}
	perChange := func(b uint64) float64 { return float64(b) / 1024 / float64(max(1, changes)) }
	fmt.Printf("watches: %d slot changes; units' indexes %.1f KB/slot change (%d answers, %.0f B each), failing instances' health %.1f KB/slot change (%d answers)\n",
		changes, perChange(ib), ia, float64(ib)/float64(max(1, ia)), perChange(hb), ha)
	fmt.Printf("sim: %d nodes, %d seeds, %d violations, full count p50 %.1f s p99 %.1f s after losing 10%%, %.2f txns/vacancy, %.1f KB served/slot change\n",
		*nodes, *seeds, violations, pct(0.5), pct(0.99), float64(txns)/float64(max(1, vac)), float64(bytes)/1024/float64(max(1, changes)))
	if violations > 0 {
		os.Exit(1)
	}
}
