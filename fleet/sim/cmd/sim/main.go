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
	fl := sim.DefineFlags(flag.CommandLine)
	nodes, seeds, first := fl.Nodes, fl.Seeds, fl.First
	deploys, volumes := fl.Deploys, fl.Volumes
	trace := flag.Bool("trace", false, "print the trace of each seed")
	memprofile := flag.String("memprofile", "", "write a heap profile here at the end")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	if *fl.NodeLostAfter > 0 && !*fl.Ops && !*fl.Storm {
		// node_lost_after is judged with the controls' view (which slots
		// existed, who held them), and mariposa always runs them: without
		// -ops or -storm the run would report what no fleet does.
		fmt.Fprintln(os.Stderr, "sim: -node-lost-after needs -ops or -storm (the controls mariposa always runs)")
		os.Exit(2)
	}
	// The simulation allocates fast and keeps little: collecting at four
	// times the live heap, not twice, saves a fifth of the CPU at 1,000
	// nodes for about 2 GB more a seed. GOGC, when set, decides.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(300)
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
			cfg := fl.Config(*first + uint64(i))
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
	for _, r := range results {
		for _, v := range r.Violations {
			fmt.Fprintf(os.Stderr, "%s (replay: %s)\n", v, fl.Config(r.Seed).Replay())
		}
		vols.Add(r.Volumes)
		deps.Reverts += r.Deploys.Reverts
		deps.Promotes += r.Deploys.Promotes
		deps.Updates += r.Deploys.Updates
		deps.Statuses += r.Deploys.Statuses
		deps.Idle += r.Deploys.Idle
		deps.Takes += r.Deploys.Takes
		deps.TakesRefused += r.Deploys.TakesRefused
		deps.Returns += r.Deploys.Returns
		deps.ReturnsRefused += r.Deploys.ReturnsRefused
		deps.Breaks += r.Deploys.Breaks
		deps.BreaksDown += r.Deploys.BreaksDown
		deps.ProgressFailed += r.Deploys.ProgressFailed
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
		fl.Config(*first).Units, fl.Config(*first).SlotsPerUnit, steps, float64(stepTime.Microseconds())/float64(max(1, steps)), rankings, float64(raft)/float64(max(1, vac)), time.Since(start).Seconds())
	if *deploys {
		fmt.Printf("deployments: %d successful, %d failed (%d auto-reverted), %d cancelled, %d never ended; %d canary phases promoted; %d instances updated in place; longest %.1f s; %d statuses written (%d healthy with no deployment running, %.2f/vacancy)\n",
			deps.Outcomes["successful"], deps.Outcomes["failed"], deps.Reverts, deps.Outcomes["cancelled"], deps.Outcomes["running"], deps.Promotes, deps.Updates, deps.Longest.Seconds(),
			deps.Statuses, deps.Idle, float64(deps.Idle)/float64(max(1, vac)))
		fmt.Printf("rollout tokens: %d taken of %d asked (%d refused, %.2f per instance updated), %d returns (%d refused, %.2f per instance updated)\n",
			deps.Takes-deps.TakesRefused, deps.Takes, deps.TakesRefused, float64(deps.TakesRefused)/float64(max(1, deps.Updates)),
			deps.Returns, deps.ReturnsRefused, float64(deps.ReturnsRefused)/float64(max(1, deps.Updates)))
		fmt.Printf("health: %d instances broke after they were said healthy (%d of them down for an update); %d deployments failed on progress_deadline\n",
			deps.Breaks, deps.BreaksDown, deps.ProgressFailed)
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
