package e2e

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// BenchmarkRestartAfterExit: the child exits on its own (status 1), and the
// next child starts; restart delay 0. Latency is the new child's first
// instruction after the old child's last, both stamped by the children on
// CLOCK_MONOTONIC.
func BenchmarkRestartAfterExit(b *testing.B) {
	const trials = 60
	agent := consultest.NewDev(b)
	stamps := filepath.Join(b.TempDir(), "stamps")
	hcl := writeHCL(b, fmt.Sprintf(`
service "flaky" {
  command = [%q]
  env     = { STAMP_FILE = %q, STAMP_SLEEP_MS = "30", STAMP_EXIT = "1" }
  restart {
    policy   = "always"
    delay    = "0s"
    attempts = 0
  }
}
`, stampBin, stamps))
	for i := 0; i < b.N; i++ {
		m := startMariposa(b, agent, nil, "-log-level", "warn", hcl)
		var got []stamp
		waitFor(b, 2*time.Minute, fmt.Sprintf("%d restarts", trials), func() (bool, string) {
			got = readStamps(stamps)
			return countStarts(got) > trials, fmt.Sprintf("%d starts", countStarts(got))
		})
		m.stop(b, syscall.SIGTERM, 20*time.Second)
		var lat latencies
		var lastStop time.Duration
		for _, s := range got {
			switch s.what {
			case "stop":
				lastStop = s.at
			case "start":
				if lastStop > 0 {
					lat = append(lat, s.at-lastStop)
					lastStop = 0
				}
			}
		}
		lat.report(b, "process exit -> restarted (delay 0, "+stampKind+" child)")
	}
}

func countStarts(s []stamp) int {
	n := 0
	for _, x := range s {
		if x.what == "start" {
			n++
		}
	}
	return n
}
