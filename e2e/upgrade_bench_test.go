package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// BenchmarkUpgrade upgrades a node in place (the node of TestUpgradeInPlace:
// an HTTP-checked service, a chatty one, two leaders) again and again,
// alternating two builds, and measures
//   - from the start of `mariposa upgrade` to the node API answering from
//     the new build;
//   - the longest time mariposa's liveness check (TTL 3 s) went without an
//     update across the upgrade: from the old build's last update to the
//     new one's first (the node API's /v1/version says it). The services'
//     own checks are the agent's (HTTP) or last 30 minutes (the supervisor
//     check): this is the one a long gap would turn critical.
func BenchmarkUpgrade(b *testing.B) {
	upgrades := 4 * benchRounds(3)
	for i := 0; i < b.N; i++ {
		n := startUpgradeNode(b)
		n.pids(b)
		builds := []string{rebuiltMariposa(b), mariposaBin}
		var answer, gap latencies
		for u := range upgrades {
			next := builds[u%2]
			install(b, next, n.bin)
			cmd := exec.Command(mariposaBin, "upgrade")
			cmd.Env = append(os.Environ(), "MARIPOSA_CONTROL_SOCKET="+n.m.sock)
			began := time.Now()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			var v versionAnswer
			for {
				var err error
				v, err = nodeVersionAnswer(n.apiAddr)
				if err == nil && strings.Contains(v.Version, upgradeVersion) == (next != mariposaBin) && v.Upgraded != nil {
					answer = append(answer, time.Since(began))
					break
				}
				if time.Since(began) > time.Minute {
					b.Fatalf("upgrade %d: no answer from the new build: %+v %v", u, v, err)
				}
				time.Sleep(time.Millisecond)
			}
			if err := cmd.Wait(); err != nil {
				b.Fatalf("upgrade %d: mariposa upgrade: %v", u, err)
			}
			waitFor(b, 30*time.Second, "the new build's first liveness update", func() (bool, string) {
				v, err := nodeVersionAnswer(n.apiAddr)
				if err != nil || v.Upgraded == nil || v.Upgraded.CheckGapSecs == 0 {
					return false, fmt.Sprintf("%+v %v", v, err)
				}
				gap = append(gap, time.Duration(v.Upgraded.CheckGapSecs*float64(time.Second)))
				return true, ""
			})
			n.pids(b)
		}
		answer.report(b, "mariposa upgrade -> node API answers from the new build")
		fmt.Printf("liveness check without an update across the upgrade (TTL 3s): n=%d p50=%.0fms max=%.0fms\n", len(gap), ms(gap.pct(0.5)), ms(gap.pct(1)))
		fmt.Printf("upgrade in place (%d upgrades): node API from the new build p50 %.1f ms, max %.1f ms; liveness check gap p50 %.0f ms, max %.0f ms (TTL 3000 ms)\n",
			upgrades, ms(answer.pct(0.5)), ms(answer.pct(1)), ms(gap.pct(0.5)), ms(gap.pct(1)))
		b.ReportMetric(ms(answer.pct(0.5)), "upgrade-answer-p50-ms")
		b.ReportMetric(ms(gap.pct(1)), "check-gap-max-ms")
	}
}
