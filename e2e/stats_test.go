package e2e

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// latencies summarises a benchmark's samples: min / median / p90 / p99 /
// max, printed and reported as benchmark metrics (in ms).
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	s := append(latencies{}, l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (l latencies) report(b *testing.B, what string) {
	b.Helper()
	line := fmt.Sprintf("%s: n=%d min=%.2fms p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms",
		what, len(l), ms(l.pct(0)), ms(l.pct(0.5)), ms(l.pct(0.9)), ms(l.pct(0.99)), ms(l.pct(1)))
	fmt.Println(line)
	b.ReportMetric(ms(l.pct(0.5)), "p50-ms")
	b.ReportMetric(ms(l.pct(0.99)), "p99-ms")
	b.ReportMetric(0, "ns/op") // the latency metrics are the result
}

// stamp is one line of testchild's -stamp-file.
type stamp struct {
	what string
	pid  int
	at   time.Duration // CLOCK_MONOTONIC
}

func readStamps(path string) []stamp {
	b, _ := os.ReadFile(path)
	var out []stamp
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		pid, _ := strconv.Atoi(f[1])
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		out = append(out, stamp{what: f[0], pid: pid, at: time.Duration(ns)})
	}
	return out
}

// benchRounds is MARIPOSA_BENCH_ROUNDS (make bench sets it), or def.
func benchRounds(def int) int {
	if v, err := strconv.Atoi(os.Getenv("MARIPOSA_BENCH_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return def
}
