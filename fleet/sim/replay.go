package sim

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/agent"
)

// A failing seed prints the command that replays it. Flags are cmd/sim's
// flags that make a run's Config, and Replay is the command line that
// makes a Config again: one file spells both, and TestReplayReproduces
// checks that what every test prints parses back to the config it ran.

// Flags are cmd/sim's flags that make a Config (DefineFlags).
type Flags struct {
	Nodes, Seeds, Units, Slots, Buckets *int
	First                               *uint64
	Chaos, Deploys, Ops, Storm          *bool
	Volumes, Placement                  *bool
	Settle, NodeLostAfter               *time.Duration
}

// DefineFlags defines the flags of a run on fs.
func DefineFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		Nodes:         fs.Int("nodes", 50, "simulated nodes"),
		Seeds:         fs.Int("seeds", 20, "seeds to run"),
		First:         fs.Uint64("seed", 1, "first seed"),
		Units:         fs.Int("units", 0, "units (default nodes/10, at least 10)"),
		Slots:         fs.Int("slots", 0, "slots per unit (default 100, at most nodes/2)"),
		Chaos:         fs.Bool("chaos", true, "mariposa kills, a cut-off node and lost answers besides the loss"),
		Deploys:       fs.Bool("deploys", false, "an operator's deploys from the seed: rolling, canary + promote, a bad version auto-reverted, a deploy racing the judge, a stalled version failed on progress_deadline; instances breaking after they were healthy"),
		Settle:        fs.Duration("settle", 0, "how long after the loss the run goes on (default 60s)"),
		Ops:           fs.Bool("ops", false, "operator actions (pause, resume, drain) and the takeover budget; 30% of the nodes lost"),
		Storm:         fs.Bool("storm", false, "the storm brake's scenario: 60% of the nodes lost, resumed 20 s later"),
		Volumes:       fs.Bool("volumes", false, "a volume that moves with the slots on every exclusive unit: handoffs and restores, and their invariants"),
		Buckets:       fs.Int("buckets", 0, "bytes as the executor's bucketed watches serve them (fleet/executor's Config.Buckets; 0: a unit's watches of its own)"),
		NodeLostAfter: fs.Duration("node-lost-after", 0, "node_lost_after on every third unit, and the invariant that no slot lost with its node starts elsewhere sooner"),
		Placement:     fs.Bool("placement", false, "a constraint on the nodes' meta on some units, resources that some nodes have no room for on others, and the invariant that no instance starts where they exclude it"),
	}
}

// Config is the run of seed that the parsed flags say.
func (f *Flags) Config(seed uint64) Config {
	u := *f.Units
	if u == 0 {
		u = max(10, *f.Nodes/10)
	}
	sl := *f.Slots
	if sl == 0 {
		sl = min(100, *f.Nodes/2)
	}
	return Config{Seed: seed, Nodes: *f.Nodes, Units: u, SlotsPerUnit: sl, ExclusiveEvery: 2, Chaos: *f.Chaos, Settle: *f.Settle,
		Deploys: *f.Deploys, Ops: *f.Ops, Storm: *f.Storm, Volumes: *f.Volumes, Buckets: *f.Buckets, Placement: *f.Placement,
		NodeLostAfter: *f.NodeLostAfter}
}

// Replay is the command that runs c again (add -trace for its trace).
// What no flag says (ExclusiveEvery other than 2, the timings, Election,
// the mutations' Faults) is named after it: such a config is a test's
// own, replayed by that test.
func (c Config) Replay() string {
	var b strings.Builder
	fmt.Fprintf(&b, "go run ./fleet/sim/cmd/sim -nodes %d -units %d -slots %d -seeds 1 -seed %d", c.Nodes, c.Units, c.SlotsPerUnit, c.Seed)
	for _, f := range []struct {
		on   bool
		flag string
	}{{!c.Chaos, "-chaos=false"}, {c.Deploys, "-deploys"}, {c.Ops, "-ops"}, {c.Storm, "-storm"}, {c.Volumes, "-volumes"}, {c.Placement, "-placement"}} {
		if f.on {
			b.WriteString(" " + f.flag)
		}
	}
	if c.Settle != 0 {
		fmt.Fprintf(&b, " -settle %s", c.Settle)
	}
	if c.Buckets != 0 {
		fmt.Fprintf(&b, " -buckets %d", c.Buckets)
	}
	if c.NodeLostAfter != 0 {
		fmt.Fprintf(&b, " -node-lost-after %s", c.NodeLostAfter)
	}
	var not []string
	if c.ExclusiveEvery != 2 {
		not = append(not, "ExclusiveEvery")
	}
	if c.LockDelay != 0 || c.Detect != 0 || c.Step != 0 || c.LoseFraction != 0 || c.LossAt != 0 {
		not = append(not, "timings")
	}
	if c.Election != 0 {
		not = append(not, "Election")
	}
	if c.Faults != (agent.Faults{}) || c.ExecFaults != (ExecFaults{}) {
		not = append(not, "Faults")
	}
	if len(not) > 0 {
		fmt.Fprintf(&b, " (and the test's %s)", strings.Join(not, ", "))
	}
	return b.String()
}
