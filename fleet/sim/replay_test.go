package sim

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A failing seed prints the command that replays it: for every config a
// test prints a replay of, the command's flags (DefineFlags, as cmd/sim
// parses them) make that config again, and nothing is left unsaid.
//
// Mutation-checked: with TestSimulationOps's replay as it was printed
// (-nodes 50 -slots 10 -seeds 1 -seed 2 -ops: without -units 10,
// -deploys, -volumes, -placement), the config differs and the row fails.
func TestReplayReproduces(t *testing.T) {
	lost := opsConfig(2)
	lost.NodeLostAfter = 20 * time.Second
	settled := config(3)
	settled.Settle, settled.Buckets = 90*time.Second, 64
	for _, tc := range []struct {
		name string
		c    Config
	}{
		{"TestSimulation", config(2)},
		{"TestSimulationOps", opsConfig(2)},
		{"TestSimulationStorm", stormConfig(1)},
		{"TestSimulationNodeLostAfter", lost},
		{"BenchmarkSim", benchConfig()},
		{"settle and buckets", settled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.c.Replay()
			args, ok := strings.CutPrefix(cmd, "go run ./fleet/sim/cmd/sim ")
			if !ok || strings.Contains(cmd, "(") {
				t.Fatalf("not a whole command: %q", cmd)
			}
			fs := flag.NewFlagSet("sim", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := DefineFlags(fs)
			if err := fs.Parse(strings.Fields(args)); err != nil || fs.NArg() > 0 {
				t.Fatalf("%q: %v %v", cmd, err, fs.Args())
			}
			if *f.Seeds != 1 {
				t.Errorf("%q runs %d seeds", cmd, *f.Seeds)
			}
			if got := f.Config(*f.First); !reflect.DeepEqual(got, tc.c) {
				t.Fatalf("%q runs\n%+v, want\n%+v", cmd, got, tc.c)
			}
		})
	}
	// A config no flag says is named as a test's own.
	c := config(1)
	c.Faults.IgnorePause = true
	if r := c.Replay(); !strings.HasSuffix(r, "(and the test's Faults)") {
		t.Errorf("a mutation's config replayed as %q", r)
	}
}
