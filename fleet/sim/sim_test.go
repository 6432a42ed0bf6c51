package sim

import (
	"cmp"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/agent"
)

var (
	seeds = flag.Int("sim.seeds", 100, "seeds TestSimulation runs")
	nodes = flag.Int("sim.nodes", 50, "nodes in TestSimulation")
	// -sim.deploys=false: the slot protocol alone (what the runs before
	// deployments were in the step machine did).
	deploys = flag.Bool("sim.deploys", true, "operator deploys in TestSimulation")
	volumes = flag.Bool("sim.volumes", true, "volumes on the exclusive units in TestSimulation")
	// -sim.placement=false: no constraints or resources (Config.Placement).
	placementOn = flag.Bool("sim.placement", true, "constraints and resources on some units in TestSimulation")
)

func config(seed uint64) Config {
	return Config{Seed: seed, Nodes: *nodes, Units: 10, SlotsPerUnit: 10, ExclusiveEvery: 2, Chaos: true, Deploys: *deploys, Volumes: *volumes, Placement: *placementOn}
}

// TestSimulation runs the seeded simulations make test-race runs: 50
// nodes, 10 units of 10 slots (every other exclusive), 10 % of the nodes
// lost at once, mariposa killed and restarted on two more, one cut off and
// healed, claim answers lost; an operator's deploys (a rolling update, a
// canary phase promoted by hand, a bad version reverted, a deploy racing
// the judge); every invariant checked at every step.
func TestSimulation(t *testing.T) {
	var vols VolumeStats
	var breaks, breaksDown int
	for seed := uint64(1); seed <= uint64(*seeds); seed++ {
		r := Run(config(seed))
		vols.Add(r.Volumes)
		for _, v := range r.Violations {
			t.Errorf("%s (replay: %s)", v, config(seed).Replay())
		}
		if t.Failed() {
			return
		}
		if r.Lost == 0 || len(r.Recovery) != r.Lost {
			t.Fatalf("seed %d: nothing was lost or recovered: %+v", seed, r)
		}
		// Every deploy happened and ended: the bad version failed and was
		// reverted, the stalled one failed on progress_deadline and was
		// reverted, the canary phase was promoted, the rest succeeded (a
		// revert may fail on progress_deadline too, a slot of its unit
		// held by no node for longer: twice in seeds 1-300).
		d := r.Deploys
		if *deploys && (d.Reverts != 2 || d.Promotes != 1 || d.ProgressFailed < 1 || d.Outcomes["failed"] != 1+d.ProgressFailed || d.Outcomes["running"] != 0 || d.Outcomes["successful"] < 5 || d.Updates < 20) {
			t.Fatalf("seed %d: the deployments did not all happen: %+v", seed, d)
		}
		breaks += d.Breaks
		breaksDown += d.BreaksDown
	}
	// Instances broke, some while down for an update (health.go).
	if *deploys && (breaks == 0 || breaksDown == 0) {
		t.Fatalf("no health break (%d), or none during a rollout (%d)", breaks, breaksDown)
	}
	t.Logf("health breaks: %d, %d of them down for an update", breaks, breaksDown)
	// The volumes' invariants were exercised: graceful handoffs restored
	// by the next holders, and holders lost without one.
	if *volumes && (vols.Handoffs == 0 || vols.FromHandoff == 0 || vols.Unplanned == 0) {
		t.Fatalf("the volumes were not exercised: %s", vols)
	}
	t.Logf("volumes: %s", vols)
}

// Seeds outside TestSimulation's range that once broke an invariant, each
// with what it found: they run as the range does.
//   - 323: a handoff one term restored and ran from was taken, after that
//     holder's loss, as planned for a later term (the slot key, deleted
//     with the session, started its LockIndex over), and its node served
//     it no more: the slot never ran again (cluster's Handoff.PlannedFor).
//     Mutation check: Handoff.PlannedFor without its Restored test fails it.
//   - ops 97: a false alarm of the volumes' invariant: a graceful handoff
//     counted as lost after its restorer ran from it and was lost in turn
//     (the next holder applies on_missing then; volumes.go volStart).
//   - ops 206, 282: an instance whose volumes were being readied when a
//     pause of scope all came was told to hold its restarts before it
//     existed, and ran unheld (fleet/agent's reconcileQueue).
func TestSimulationPinnedSeeds(t *testing.T) {
	for _, c := range []Config{config(323), opsConfig(97), opsConfig(206), opsConfig(282)} {
		for _, v := range Run(c).Violations {
			t.Errorf("%s (replay: %s)", v, c.Replay())
		}
	}
}

// The same seed gives the same trace.
func TestSimulationReplays(t *testing.T) {
	var a, b []string
	ca, cb := config(7), config(7)
	ca.Trace = func(l string) { a = append(a, l) }
	cb.Trace = func(l string) { b = append(b, l) }
	ra, rb := Run(ca), Run(cb)
	if ra.Trace != rb.Trace || strings.Join(a, "\n") != strings.Join(b, "\n") {
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("traces differ at line %d:\n%s\n%s", i, a[i], b[i])
			}
		}
		t.Fatalf("traces differ: %s vs %s (%d vs %d lines)", ra.Trace, rb.Trace, len(a), len(b))
	}
	if Run(config(8)).Trace == ra.Trace {
		t.Error("seeds 7 and 8 gave the same trace")
	}
}

// A Consul leader election shorter than the hold rule's tolerance kills
// nothing (issue 33); with the strict rule (no detection floor) it kills
// every exclusive instance.
func TestSimulationRidesElection(t *testing.T) {
	for _, tc := range []struct {
		detect time.Duration
		kills  bool
	}{{0, false}, {-1, true}} {
		c := Config{Seed: 3, Nodes: 50, Units: 10, SlotsPerUnit: 10, ExclusiveEvery: 2, Election: 3 * time.Second, Detect: tc.detect}
		r := Run(c)
		for _, v := range r.Violations {
			t.Errorf("detect %v: %s", tc.detect, v)
		}
		if (r.Kills > 0) != tc.kills {
			t.Errorf("detect %v: %d instances killed over a 3 s election, want kills: %v", tc.detect, r.Kills, tc.kills)
		}
	}
}

// Each mutation breaks one mechanism; the simulator must notice within a
// few seeds.
func TestSimulationCatchesMutations(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string
		// seeds tried (0: 30)
		seeds uint64
	}{
		{"watchdog off", func(c *Config) { c.Faults = agent.Faults{NoWatchdog: true} }, "exclusive slot", 0},
		{"holder writes its lock key", func(c *Config) { c.ExecFaults.WriteHeldKey = true }, "token moved", 0},
		{"release before the stop", func(c *Config) { c.ExecFaults.ReleaseBeforeStop = true }, "", 0},
		// A failure-detection floor above Consul's: the minority side's
		// holder outlives its hold.
		{"detection floor overstated", func(c *Config) { c.Detect = 15 * time.Second }, "exclusive slot", 0},
		// No bound: every no-leader probe of a held read counts as a
		// confirmation.
		{"no-leader probes confirm the holds", func(c *Config) { c.Faults.ProbeConfirms = true }, "exclusive slot", 0},
		// Deployments.
		{"updates without a rollout token", func(c *Config) { c.Faults.NoToken = true }, "down for an update at once", 0},
		{"failed without its auto_revert", func(c *Config) { c.Faults.NoRevert = true }, "on the failed version", 0},
		// Health breaks (health.go): a break within min_healthy_time
		// that does not start the time over.
		{"a break within min_healthy_time ignored", func(c *Config) { c.Faults.IgnoreUnhealthy = true }, "not healthy without a break for min_healthy_time", 0},
		// progress_deadline (progress.go): the judge fails too early, or
		// its failure never lands.
		{"progress_deadline without its skew", func(c *Config) { c.Faults.NoProgressSkew = true }, "never went longer than", 0},
		{"progress_deadline's failure never written", func(c *Config) { c.ExecFaults.DropProgressFail = true }, ") not failed ", 0},
		// Two judges at once (the judge changed hands as a deployment
		// moved): about one seed in fifteen.
		{"the judge's write without its CAS", func(c *Config) { c.ExecFaults.NoDeployCAS = true }, "deployment record of", 60},
		{"decisions without their audit record", func(c *Config) { c.ExecFaults.NoAudit = true }, "without its audit record", 0},
		{"a holder's status written into its lock key", func(c *Config) { c.ExecFaults.PublishInHeldKey = true }, "token moved", 0},
		// Volumes.
		{"an instance started with its restore, not after it", func(c *Config) { c.Faults.StartBeforeRestore = true }, "before its restore is done", 0},
		{"a release without waiting for its handoff", func(c *Config) { c.Faults.ReleaseBeforeHandoff = true }, "is lost", 0},
		// Placement: ranked by HRW alone, a slot lands where its
		// constraint or a node's capacity excludes it.
		{"ranked without the units' constraints and resources", func(c *Config) { c.Placement, c.ExecFaults.NoPlacement = true, true }, "placement:", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var found []string
			seeds := cmp.Or(tc.seeds, 30)
			for seed := uint64(1); seed <= seeds && len(found) == 0; seed++ {
				// Placement only where the mutation is placement's: the
				// others are caught in the seeds they were tried on.
				c := config(seed)
				c.Placement = false
				tc.mut(&c)
				for _, v := range Run(c).Violations {
					if strings.Contains(v, tc.want) {
						found = append(found, v)
					}
				}
			}
			if len(found) == 0 {
				t.Fatalf("no violation %q in %d seeds", tc.want, seeds)
			}
			t.Log(found[0])
		})
	}
}

func ExampleResult_Percentile() {
	r := Result{Recovery: nil}
	fmt.Println(r.Percentile(0.5))
	// Output: 0s
}

func benchConfig() Config {
	return Config{Seed: 1, Nodes: 1000, Units: 100, SlotsPerUnit: 100, ExclusiveEvery: 2}
}

// BenchmarkSim is the 1,000-node figure of make bench: one seed of 1,000
// nodes, 100 units x 100 slots (every other exclusive), 10 % lost at once
// and nothing else (the issue's figure; make sim adds the chaos).
// Simulated figures, labelled as such.
func BenchmarkSim(b *testing.B) {
	for range b.N {
		c := benchConfig()
		r := Run(c)
		if len(r.Violations) > 0 {
			b.Fatalf("%s (replay: %s)", r.Violations[0], c.Replay())
		}
		b.ReportMetric(r.Percentile(0.5).Seconds(), "sim-p50-s")
		b.ReportMetric(r.Percentile(0.99).Seconds(), "sim-p99-s")
		b.ReportMetric(float64(r.Txns)/float64(max(1, r.Vacancies)), "txns/vacancy")
		b.ReportMetric(float64(r.BytesServed)/1024/float64(max(1, r.SlotChanges)), "KB/slot-change")
	}
}

// TestSimulationNodeLostAfter: the chaos run with the operator's controls
// (the executor's configuration) and node_lost_after on every third unit (fleet/agent/stopafter.go): no slot lost with its node is
// started elsewhere sooner after the loss, and the full count is back
// within the settle time plus node_lost_after.
func TestSimulationNodeLostAfter(t *testing.T) {
	waited := 0
	for seed := uint64(1); seed <= 5; seed++ {
		c := opsConfig(seed) // with the controls, as the executor runs it
		c.NodeLostAfter = 20 * time.Second
		r := Run(c)
		for _, v := range r.Violations {
			t.Errorf("%s (replay: %s -trace)", v, c.Replay())
		}
		if t.Failed() {
			return
		}
		if r.Lost == 0 || len(r.Recovery) != r.Lost {
			t.Fatalf("seed %d: nothing was lost or recovered: %+v", seed, r)
		}
		for _, d := range r.Recovery {
			if d >= c.NodeLostAfter {
				waited++
			}
		}
	}
	if waited == 0 {
		t.Fatal("no lost slot waited for node_lost_after")
	}
}
