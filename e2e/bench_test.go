package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// BenchmarkRestartAfterExit: the child exits on its own (status 1) after
// 100 ms, and the next child starts; restart delay 0. Latency is the new
// child's first instruction after the old child's last, both stamped by the
// children on CLOCK_MONOTONIC. Anchors, from the same run and the same
// child:
//
//   - the floor: fork+exec+wait with nothing else. Where a C compiler
//     exists, testdata/rawloop.c: vfork, execve and wait4 in a loop (no
//     pipe, no thread, no process group); and always from Go
//     (rawRestarts): the runtime's clone(CLONE_VM|CLONE_VFORK)+execve
//     (syscall.ForkExec, whose only extra is the close-on-exec pipe that
//     reports a failed exec) and wait4, from one goroutine. What a
//     supervisor does beyond the floor is its overhead;
//   - a loop on os/exec (bareRestarts), with stdout and stderr on pipes
//     read by goroutines as a supervisor that keeps the output needs them:
//     not bare, it costs about what mariposa does;
//   - ContainerPilot, the closest peer, when MARIPOSA_CONTAINERPILOT_BIN
//     names a ContainerPilot 3 binary (none is built by this repository:
//     see website/running.md): a job with restarts
//     "unlimited" running the same child, against the same Consul agent.
//
// mariposa's overhead is printed over each, as a difference and a ratio.
// They alternate for MARIPOSA_BENCH_ROUNDS rounds (default 3) of 60
// restarts each, and the overheads are taken from all rounds together: the
// difference sought (tens of microseconds) is smaller than the drift of one
// VM's timings between two runs.
func BenchmarkRestartAfterExit(b *testing.B) {
	const trials = 60
	rounds := benchRounds(3)
	agent := consultest.NewDev(b)
	// over formats mariposa's p50 (m) beside an anchor's.
	over := func(what string, m, a latencies) string {
		return fmt.Sprintf("%s p50 %.3f ms: overhead %.3f ms, ratio %.2f", what, ms(a.pct(0.5)), ms(m.pct(0.5)-a.pct(0.5)), float64(m.pct(0.5))/float64(a.pct(0.5)))
	}
	for i := 0; i < b.N; i++ {
		var all, allBare, allRaw, allC, allCP latencies
		for r := range rounds {
			stamps := filepath.Join(b.TempDir(), "stamps")
			hcl := writeHCL(b, fmt.Sprintf(`
service "flaky" {
  command = [%q]
  env     = { STAMP_FILE = %q, STAMP_SLEEP_MS = "100", STAMP_EXIT = "1" }
  restart {
    policy   = "always"
    delay    = "0s"
    attempts = 0
  }
}
`, stampBin, stamps))
			m := startMariposa(b, agent, nil, "-log-level", "warn", hcl)
			// The restarts measured are a settled node's (its start's
			// pages unmapped, see idleSettle), as most restarts are.
			time.Sleep(idleSettle) // the measuring window opens on a settled node
			skip := len(readStamps(stamps))
			var got []stamp
			waitFor(b, 2*time.Minute, fmt.Sprintf("%d restarts", trials), func() (bool, string) {
				got = readStamps(stamps)[skip:]
				return countStarts(got) > trials, fmt.Sprintf("%d starts", countStarts(got))
			})
			m.stop(b, syscall.SIGTERM, 20*time.Second)
			lat := exitToStart(got)
			bare := bareRestarts(b, trials)
			raw := rawRestarts(b, trials)
			line := fmt.Sprintf("process exit -> restarted, round %d: mariposa p50 %.3f ms; ", r+1, ms(lat.pct(0.5)))
			if rawLoopBin != "" {
				c := rawCRestarts(b, trials)
				line += over("vfork+execve+wait4 in C", lat, c) + "; "
				allC = append(allC, c...)
			}
			line += over("ForkExec+wait4 from Go", lat, raw) + "; " + over("os/exec loop", lat, bare)
			if containerPilotBin != "" {
				cp := containerPilotRestarts(b, agent, trials)
				line += "; " + over("ContainerPilot", lat, cp)
				allCP = append(allCP, cp...)
			}
			fmt.Println(line)
			all, allBare, allRaw = append(all, lat...), append(allBare, bare...), append(allRaw, raw...)
		}
		all.report(b, "process exit -> restarted (delay 0, "+stampKind+" child)")
		floor := allRaw
		if len(allC) > 0 {
			allC.report(b, "vfork+execve+wait4 in C, same child (the floor)")
			floor = allC
		}
		allRaw.report(b, "ForkExec+wait4 from Go, same child")
		allBare.report(b, "os/exec loop with output pipes, same child")
		if len(allCP) > 0 {
			allCP.report(b, "ContainerPilot job with restarts unlimited, same child")
		}
		line := fmt.Sprintf("process exit -> restarted: mariposa p50 %.3f ms (%d rounds together); ", ms(all.pct(0.5)), rounds)
		if len(allC) > 0 {
			line += over("over vfork+execve+wait4 in C (the floor)", all, allC) + "; "
		}
		line += over("over ForkExec+wait4 from Go", all, allRaw) + "; " + over("over the os/exec loop", all, allBare)
		if len(allCP) > 0 {
			line += "; " + over("beside ContainerPilot", all, allCP) + " (goal: ratio < 1)"
			b.ReportMetric(float64(all.pct(0.5))/float64(allCP.pct(0.5)), "ratio-containerpilot-p50")
		} else {
			line += "; ContainerPilot not measured (MARIPOSA_CONTAINERPILOT_BIN unset)"
		}
		fmt.Println(line + " (goal: overhead over the floor <= 0.1 ms)")
		b.ReportMetric(ms(all.pct(0.5)-floor.pct(0.5)), "overhead-floor-p50-ms")
		b.ReportMetric(ms(all.pct(0.5)-allBare.pct(0.5)), "overhead-p50-ms")
	}
}

// exitToStart is, for each start stamped after a stop, the time from the
// stop to the start.
func exitToStart(stamps []stamp) latencies {
	var lat latencies
	var lastStop time.Duration
	for _, s := range stamps {
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
	return lat
}

// bareRestarts runs the stamp child n+1 times in a row from this process,
// each started as soon as the last is reaped: exec.Cmd with stdout and
// stderr on pipes read by goroutines (a supervisor keeps the output), in
// its own process group. It returns the exit-to-start latencies.
func bareRestarts(b *testing.B, n int) latencies {
	stamps := filepath.Join(b.TempDir(), "bare-stamps")
	env := append(os.Environ(), "STAMP_FILE="+stamps, "STAMP_SLEEP_MS=100", "STAMP_EXIT=1")
	for i := 0; i <= n; i++ {
		cmd := exec.Command(stampBin)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Run(); err != nil {
			if _, ok := err.(*exec.ExitError); !ok {
				b.Fatal(err)
			}
		}
	}
	lat := exitToStart(readStamps(stamps))
	if len(lat) != n {
		b.Fatalf("bare loop: %d latencies, want %d", len(lat), n)
	}
	return lat
}

// rawRestarts is the floor of a restart: the stamp child run n+1 times in
// a row from this goroutine with syscall.ForkExec (the runtime's
// clone(CLONE_VM|CLONE_VFORK) and execve; its only extra is the
// close-on-exec pipe that reports a failed exec, closed by the exec
// itself) and reaped with wait4, each started as soon as the last is
// reaped. No stdio (fds 0-2 closed in the child), no process group, no
// goroutine, no pidfd. It returns the exit-to-start latencies.
func rawRestarts(b *testing.B, n int) latencies {
	stamps := filepath.Join(b.TempDir(), "raw-stamps")
	attr := &syscall.ProcAttr{Env: append(os.Environ(), "STAMP_FILE="+stamps, "STAMP_SLEEP_MS=100", "STAMP_EXIT=1")}
	argv := []string{stampBin}
	for i := 0; i <= n; i++ {
		pid, err := syscall.ForkExec(stampBin, argv, attr)
		if err != nil {
			b.Fatal(err)
		}
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if err != syscall.EINTR {
				if err != nil {
					b.Fatal(err)
				}
				break
			}
		}
	}
	lat := exitToStart(readStamps(stamps))
	if len(lat) != n {
		b.Fatalf("raw loop: %d latencies, want %d", len(lat), n)
	}
	return lat
}

// rawCRestarts runs testdata/rawloop.c, which runs the stamp child n+1
// times in a row with vfork, execve and wait4 only; it returns the
// exit-to-start latencies.
func rawCRestarts(b *testing.B, n int) latencies {
	stamps := filepath.Join(b.TempDir(), "rawc-stamps")
	cmd := exec.Command(rawLoopBin, strconv.Itoa(n+1), stampBin)
	cmd.Env = append(os.Environ(), "STAMP_FILE="+stamps, "STAMP_SLEEP_MS=100", "STAMP_EXIT=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v %s", rawLoopBin, err, out)
	}
	lat := exitToStart(readStamps(stamps))
	if len(lat) != n {
		b.Fatalf("C loop: %d latencies, want %d", len(lat), n)
	}
	return lat
}

// containerPilotBin is a ContainerPilot 3 binary to measure beside
// mariposa ($MARIPOSA_CONTAINERPILOT_BIN), or "".
var containerPilotBin = os.Getenv("MARIPOSA_CONTAINERPILOT_BIN")

// containerPilotRestarts runs the stamp child as a ContainerPilot job
// with restarts "unlimited" (ContainerPilot restarts at once: it has no
// delay) until n restarts, with the agent as its Consul, and returns the
// exit-to-start latencies. The job has no port, so it is not registered:
// nothing is sent to Consul between an exit and the next start, as for
// mariposa's service, whose registration stays.
func containerPilotRestarts(b *testing.B, agent *consultest.Agent, n int) latencies {
	dir := b.TempDir()
	stamps := filepath.Join(dir, "cp-stamps")
	cfg := filepath.Join(dir, "containerpilot.json5")
	// Plain JSON, which JSON5 reads as it is.
	conf := fmt.Sprintf(`{
  "consul": %q,
  "logging": {"level": "WARN", "output": "stderr"},
  "control": {"socket": %q},
  "jobs": [{"name": "flaky", "exec": [%q], "restarts": "unlimited"}]
}
`, agent.HTTPAddr(), filepath.Join(dir, "cp.socket"), stampBin)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(containerPilotBin, "-config", cfg)
	cmd.Env = append(os.Environ(), "STAMP_FILE="+stamps, "STAMP_SLEEP_MS=100", "STAMP_EXIT=1")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	var got []stamp
	waitFor(b, 2*time.Minute, fmt.Sprintf("ContainerPilot: %d restarts", n), func() (bool, string) {
		select {
		case <-done:
			b.Fatalf("ContainerPilot exited: %s", out.String())
		default:
		}
		got = readStamps(stamps)
		return countStarts(got) > n, fmt.Sprintf("%d starts", countStarts(got))
	})
	lat := exitToStart(got)
	if len(lat) > n {
		lat = lat[:n]
	}
	return lat
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

// BenchmarkRestartAfterCheckCritical: a TTL check is set critical through
// the agent, and mariposa, following health with a blocking query, restarts
// the process (grace and unhealthy_for 0). Latency is from just before the
// harness marks the check critical to the new child's first instruction.
func BenchmarkRestartAfterCheckCritical(b *testing.B) {
	const trials = 50
	agent := consultest.NewDev(b)
	c := agent.Client(b)
	stamps := filepath.Join(b.TempDir(), "stamps")
	hcl := writeHCL(b, fmt.Sprintf(`
service "ttl" {
  command = [%q]
  env     = { STAMP_FILE = %q, STAMP_SLEEP_MS = "-1" }
  check "alive" {
    ttl = "1h"
  }
  restart {
    grace         = "0s"
    unhealthy_for = "0s"
    delay         = "0s"
    attempts      = 0
  }
  stop {
    timeout = "1s"
  }
}
`, stampBin, stamps))
	checkID := "ttl-" + agent.Name + ":alive"
	for i := 0; i < b.N; i++ {
		m := startMariposa(b, agent, nil, "-log-level", "warn", hcl)
		var lat latencies
		for trial := 0; trial <= trials; trial++ {
			var starts int
			waitFor(b, 30*time.Second, "a child", func() (bool, string) {
				starts = countStarts(readStamps(stamps))
				return starts == trial+1, fmt.Sprint(starts)
			})
			if trial == trials {
				break
			}
			// The application reports healthy; mariposa sees it pass.
			if err := c.Agent().PassTTL(checkID, "ok"); err != nil {
				b.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			t0 := leadertest.Mono()
			if err := c.Agent().FailTTL(checkID, "broken"); err != nil {
				b.Fatal(err)
			}
			waitFor(b, 30*time.Second, "the restart", func() (bool, string) {
				return countStarts(readStamps(stamps)) == trial+2, "not yet"
			})
			s := readStamps(stamps)
			lat = append(lat, s[len(s)-1].at-t0)
		}
		m.stop(b, syscall.SIGTERM, 20*time.Second)
		lat.report(b, "check critical -> restarted (grace 0, unhealthy_for 0, "+stampKind+" child)")
		b.Log("this is the first restart after a check turns critical; a process that stays unhealthy is restarted " +
			"again only once its check had time to report about it (the later of grace + unhealthy_for and interval + timeout " +
			"or the ttl: about 15s after each start with the defaults): see website/health.md")
	}
}

// BenchmarkDependencyToStart: a dependency becomes passing and the
// dependent, gated on it, starts. Latency is from just before the harness
// marks the dependency passing to the dependent's first instruction. The
// dependency stays down 500ms before it comes back, as a real one does: a
// dependency flapping many times a second meets the per-query rate limit
// (one query per 100ms after a burst of 5) and waits up to 100ms more.
func BenchmarkDependencyToStart(b *testing.B) {
	const trials = 40
	agent := consultest.NewDev(b)
	c := agent.Client(b)
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "db1", Name: "db", Port: 5432,
		Check: &api.AgentServiceCheck{CheckID: "db1:ttl", TTL: "1h"}}); err != nil {
		b.Fatal(err)
	}
	stamps := filepath.Join(b.TempDir(), "stamps")
	hcl := writeHCL(b, fmt.Sprintf(`
service "dependent" {
  command = [%q]
  env     = { STAMP_FILE = %q, STAMP_SLEEP_MS = "-1" }
  depends_on "db" {
    on_lost = "stop"
  }
  stop {
    timeout = "1s"
  }
}
`, stampBin, stamps))
	for i := 0; i < b.N; i++ {
		_ = c.Agent().FailTTL("db1:ttl", "down")
		m := startMariposa(b, agent, nil, "-log-level", "warn", hcl)
		var lat latencies
		for trial := 0; trial < trials; trial++ {
			waitFor(b, 30*time.Second, "waiting", func() (bool, string) {
				sc := supervisorCheck(c, "dependent", agent.Name)
				return sc != nil && strings.HasPrefix(sc.Output, "waiting:"), fmt.Sprint(sc)
			})
			time.Sleep(500 * time.Millisecond) // down for a while
			t0 := leadertest.Mono()
			if err := c.Agent().PassTTL("db1:ttl", "up"); err != nil {
				b.Fatal(err)
			}
			waitFor(b, 30*time.Second, "the dependent", func() (bool, string) {
				return countStarts(readStamps(stamps)) == trial+1, "not yet"
			})
			s := readStamps(stamps)
			lat = append(lat, s[len(s)-1].at-t0)
			if err := c.Agent().FailTTL("db1:ttl", "down"); err != nil {
				b.Fatal(err)
			}
		}
		m.stop(b, syscall.SIGTERM, 20*time.Second)
		lat.report(b, "dependency passing -> dependent started ("+stampKind+" child)")
	}
}

// BenchmarkLeaderFailover: standby mode on two client agents; the leader's
// mariposa gets SIGTERM (graceful) or SIGKILL (crash), and the latency runs
// to the standby's child's first instruction. Defaults: lock_delay 1s,
// liveness TTL 3s. The graceful handover and its anchor (`consul lock` on
// the same agents with the same child) alternate for MARIPOSA_BENCH_ROUNDS
// rounds (default 3) of 20 handovers each, and the ratio is taken from all
// rounds together: one round's p50 moves by more than the difference
// sought.
func BenchmarkLeaderFailover(b *testing.B) {
	const trials, killTrials = 20, 10
	rounds := benchRounds(3)
	cl, hcl, stamps, leaderNode := leaderBench(b)
	handovers := func(how syscall.Signal, n int, via map[string]*consultest.Agent) latencies {
		return leaderHandovers(b, cl, hcl, stamps, leaderNode, how, n, via, false)
	}
	for i := 0; i < b.N; i++ {
		var graceful, lockLat latencies
		for r := range rounds {
			g := handovers(syscall.SIGTERM, trials, nil)
			l := consulLockFailover(b, cl, trials, nil)
			fmt.Printf("leader stops gracefully, round %d: mariposa p50 %.2f ms, consul lock p50 %.2f ms: ratio %.2f\n",
				r+1, ms(g.pct(0.5)), ms(l.pct(0.5)), float64(g.pct(0.5))/float64(l.pct(0.5)))
			graceful, lockLat = append(graceful, g...), append(lockLat, l...)
		}
		graceful.report(b, "leader's mariposa SIGTERM -> standby's child running")
		handovers(syscall.SIGKILL, killTrials, nil).report(b, "leader's mariposa SIGKILL -> standby's child running (lock_delay 1s, liveness TTL 3s)")
		lockLat.report(b, "consul lock SIGTERM -> standby's child running (the anchor)")
		fmt.Printf("leader stops gracefully -> standby's child running: mariposa p50 %.2f ms, consul lock p50 %.2f ms (%d rounds together): ratio %.2f (goal <= 1.0)\n",
			ms(graceful.pct(0.5)), ms(lockLat.pct(0.5)), rounds, float64(graceful.pct(0.5))/float64(lockLat.pct(0.5)))
		b.ReportMetric(float64(graceful.pct(0.5))/float64(lockLat.pct(0.5)), "ratio-graceful-p50")

		// Where the time goes: one more round of each, each client's
		// supervisor talking to its agent through a proxy that stamps
		// every request's start and end on the children's clock. The
		// proxy adds a hop to every round trip, so these handovers are
		// slower than the ones above: the phases are what they show.
		tps, via := map[string]*timingProxy{}, map[string]*consultest.Agent{}
		for _, a := range cl.Clients {
			tps[a.Name] = newTimingProxy(b, a.HTTPAddr())
			via[a.Name] = &consultest.Agent{Name: a.Name, Ports: consultest.Ports{HTTP: portOf(tps[a.Name].addr)}}
		}
		const timed = 10
		var mp, lp []handoverPhases
		windows = nil
		handoversTimed := handovers(syscall.SIGTERM, timed, via)
		mp = phasesOf(tps, windows)
		mw := windows
		windows = nil
		lockTimed := consulLockFailover(b, cl, timed, via)
		lp = phasesOf(tps, windows)
		// MARIPOSA_BENCH_LOGS=DIR keeps every request the proxies saw.
		if dir := os.Getenv("MARIPOSA_BENCH_LOGS"); dir != "" {
			_ = os.MkdirAll(dir, 0o755)
			for n, tp := range tps {
				var sb strings.Builder
				for _, r := range tp.requests() {
					fmt.Fprintf(&sb, "%.3f %.3f %s %s?%s %.200s\n", ms(r.start), ms(r.end), r.method, r.path, r.query, r.body)
				}
				_ = os.WriteFile(filepath.Join(dir, "handover-requests-"+n+".txt"), []byte(sb.String()), 0o644)
			}
			for name, ws := range map[string][]handoverWindow{"mariposa": mw, "consul-lock": windows} {
				var sb strings.Builder
				for _, w := range ws {
					fmt.Fprintf(&sb, "%s %.3f %.3f\n", w.leader, ms(w.t0), ms(w.started))
				}
				_ = os.WriteFile(filepath.Join(dir, "handover-windows-"+name+".txt"), []byte(sb.String()), 0o644)
			}
		}
		fmt.Printf("leader stops gracefully, through a timing proxy (%d handovers each; p50 mariposa %.2f ms, consul lock %.2f ms): where the time goes, p50 ms:\n%s",
			timed, ms(handoversTimed.pct(0.5)), ms(lockTimed.pct(0.5)), phaseTable(mp, lp))
	}
}

// leaderBench starts the leader benchmarks' cluster (one server, two
// clients) and writes their service: a leader-elected stamp child. It
// returns the cluster, the file, the stamps' file and how to find the node
// whose instance leads.
func leaderBench(b *testing.B) (cl *consultest.Cluster, hcl, stamps string, leaderNode func() string) {
	cl = consultest.NewCluster(b, 1, 2)
	c := cl.Servers[0].Client(b)
	dir := b.TempDir()
	hcl = writeHCL(b, fmt.Sprintf(`
service "lead" {
  command = ["/bin/sh", "-c", "exec %s"]
  env     = { STAMP_FILE = "%s/stamps", STAMP_SLEEP_MS = "-1" }
  leader {
    key = "mariposa/leader/bench-failover"
  }
  stop {
    timeout = "1s"
  }
}
`, stampBin, dir))
	stamps = filepath.Join(dir, "stamps")
	leaderNode = func() string {
		var l string
		waitFor(b, 60*time.Second, "one passing leader", func() (bool, string) {
			es, _, _ := c.Health().Service("lead", "", true, nil)
			if len(es) != 1 {
				return false, fmt.Sprint(len(es))
			}
			l = es[0].Node.Node
			return true, l
		})
		return l
	}
	return cl, hcl, stamps, leaderNode
}

// BenchmarkLeaderFailoverSettled: the graceful handover of
// BenchmarkLeaderFailover between settled nodes, each mariposa idleSettle
// old or more when its leader stops: a running fleet's takeover, where the
// code it runs may have been unmapped with the start's pages (see
// command/memory.go) and is mapped again on the way. BenchmarkLeaderFailover
// hands over between mariposas a few seconds old; the two p50s compare
// across runs only as well as a handover's p50 does (its rounds move by
// 0.2-0.4 of the ratio), so two rounds of 5 handovers each alternate with 5
// between young nodes, pooled (a settled handover waits 20 s: about 4
// minutes in all).
func BenchmarkLeaderFailoverSettled(b *testing.B) {
	const trials, rounds = 5, 2
	cl, hcl, stamps, leaderNode := leaderBench(b)
	for i := 0; i < b.N; i++ {
		var settled, young latencies
		for range rounds {
			settled = append(settled, leaderHandovers(b, cl, hcl, stamps, leaderNode, syscall.SIGTERM, trials, nil, true)...)
			young = append(young, leaderHandovers(b, cl, hcl, stamps, leaderNode, syscall.SIGTERM, trials, nil, false)...)
		}
		settled.report(b, "leader's mariposa SIGTERM -> standby's child running, settled nodes")
		young.report(b, "the same between mariposas a few seconds old")
		fmt.Printf("leader stops gracefully: settled nodes p50 %.2f ms beside %.2f ms between young ones (%d rounds together): ratio %.2f\n",
			ms(settled.pct(0.5)), ms(young.pct(0.5)), rounds, float64(settled.pct(0.5))/float64(young.pct(0.5)))
		b.ReportMetric(float64(settled.pct(0.5))/float64(young.pct(0.5)), "ratio-settled-young-p50")
	}
}

// leaderHandovers starts a mariposa on every client of cl, hands over n
// times by sending how to the leader's (started again as the next standby),
// and stops them all. via, when not nil, names the agent each client's
// mariposa talks to (a timing proxy in front of it). settled: each handover
// waits until both mariposas have run idleSettle, so that it is a settled
// node's (its start's pages unmapped, see command/memory.go), as a
// standby's takeover in a running fleet is; otherwise the next handover
// follows as soon as the restarted standby contends.
func leaderHandovers(b *testing.B, cl *consultest.Cluster, hcl, stamps string, leaderNode func() string, how syscall.Signal, n int, via map[string]*consultest.Agent, settled bool) latencies {
	c := cl.Servers[0].Client(b)
	agentFor := func(a *consultest.Agent) *consultest.Agent {
		if via != nil {
			return via[a.Name]
		}
		return a
	}
	sups, started := map[string]*mariposa{}, map[string]time.Time{}
	for _, a := range cl.Clients {
		sups[a.Name], started[a.Name] = startMariposa(b, agentFor(a), nil, "-log-level", "warn", hcl), time.Now()
	}
	// standbyReady: a standby's mariposa contends once its instance
	// is a standby. Its node's session alone says less: mariposa
	// makes it at its start, for its node lock, before the service's
	// instance boots (seen: handovers timed from a stop while the
	// standby was still starting).
	// The event is read from its audit file (the default one, beside
	// its control socket).
	standbyReady := func(node string) (bool, string) {
		audit, _ := os.ReadFile(filepath.Join(filepath.Dir(sups[node].sock), "audit.jsonl"))
		return bytes.Contains(audit, []byte(`"kind":"standby"`)), "no standby event yet"
	}
	var lat latencies
	for range n {
		if settled {
			for _, at := range started {
				time.Sleep(time.Until(at.Add(idleSettle))) // the measuring window opens on settled nodes
			}
		}
		l := leaderNode()
		lat = append(lat, handover(b, c, cl, l, stamps, standbyReady, func() { _ = sups[l].cmd.Process.Signal(how) }))
		<-sups[l].done
		sups[l], started[l] = startMariposa(b, agentFor(clientNamed(cl, l)), nil, "-log-level", "warn", hcl), time.Now()
	}
	for _, m := range sups {
		m.stop(b, syscall.SIGTERM, 20*time.Second)
	}
	return lat
}

// consulLockFailover runs `consul lock PREFIX "exec stampchild"` on every
// client of cl, and trials times SIGTERMs the holder (the parent of the
// running child) and measures until the standby's child stamps its start;
// the stopped holder is started again as the next standby.
func consulLockFailover(b *testing.B, cl *consultest.Cluster, trials int, via map[string]*consultest.Agent) latencies {
	bin, err := consultest.Binary()
	if err != nil {
		b.Fatal(err)
	}
	c := cl.Servers[0].Client(b)
	stamps := filepath.Join(b.TempDir(), "lock-stamps")
	type holder struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	procs := map[string]*holder{}
	start := func(a *consultest.Agent) {
		addr := a.HTTPAddr()
		if via != nil {
			addr = via[a.Name].HTTPAddr()
		}
		cmd := exec.Command(bin, "lock", "-http-addr="+addr,
			"mariposa/bench/consul-lock", "exec "+stampBin)
		cmd.Env = append(os.Environ(), "STAMP_FILE="+stamps, "STAMP_SLEEP_MS=-1")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		h := &holder{cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(h.done) }()
		procs[a.Name] = h
	}
	for _, a := range cl.Clients {
		start(a)
	}
	// Stopped on return: the next round's mariposas run without them.
	defer func() {
		for _, h := range procs {
			_ = h.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-h.done:
			case <-time.After(10 * time.Second):
				_ = h.cmd.Process.Kill()
			}
		}
	}()
	// The holder is the consul lock whose child stamped the last start.
	holderNode := func() string {
		var node string
		waitFor(b, 60*time.Second, "a consul lock holder's child", func() (bool, string) {
			s := readStamps(stamps)
			if len(s) == 0 || s[len(s)-1].what != "start" {
				return false, "no child"
			}
			ppid := parentPID(s[len(s)-1].pid)
			for name, h := range procs {
				if h.cmd.Process.Pid == ppid {
					node = name
					return true, name
				}
			}
			return false, fmt.Sprint("parent ", ppid)
		})
		return node
	}
	var lat latencies
	for trial := 0; trial < trials; trial++ {
		l := holderNode()
		lat = append(lat, handover(b, c, cl, l, stamps, nil, func() { _ = procs[l].cmd.Process.Signal(syscall.SIGTERM) }))
		<-procs[l].done
		start(clientNamed(cl, l))
	}
	return lat
}

// handover waits until every client but leader contends (holds a
// session, waiting on the lock, and ready says so when not nil), calls
// stop, and returns the time from just before it to the next child's
// first instruction.
func handover(b *testing.B, c *api.Client, cl *consultest.Cluster, leader, stamps string, ready func(node string) (bool, string), stop func()) time.Duration {
	for _, a := range cl.Clients {
		if a.Name != leader {
			waitFor(b, 30*time.Second, "the standby contending", func() (bool, string) {
				ss, _, err := c.Session().Node(a.Name, nil)
				if err != nil || len(ss) == 0 {
					return false, fmt.Sprint(len(ss), err)
				}
				if ready != nil {
					return ready(a.Name)
				}
				return true, ""
			})
		}
	}
	before := countStarts(readStamps(stamps))
	t0 := leadertest.Mono()
	stop()
	waitFor(b, 60*time.Second, "the standby's child", func() (bool, string) {
		return countStarts(readStamps(stamps)) > before, "not yet"
	})
	s := readStamps(stamps)
	windows = append(windows, handoverWindow{leader: leader, t0: t0, started: s[len(s)-1].at})
	return s[len(s)-1].at - t0
}

// handoverWindow is one handover: the node that led, when the harness
// stopped it, and when the next child started (CLOCK_MONOTONIC).
type handoverWindow struct {
	leader      string
	t0, started time.Duration
}

// windows collects every handover's window (read by the timed round).
var windows []handoverWindow

// parentPID is pid's parent, from /proc; 0 when unknown.
func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// restartRound runs the stamp child under mariposa (with args, and body
// added to the service) until trials restarts, and returns the exit to
// start latencies.
func restartRound(b *testing.B, agent *consultest.Agent, trials int, body string, args ...string) latencies {
	stamps := filepath.Join(b.TempDir(), "stamps")
	hcl := writeHCL(b, fmt.Sprintf(`
service "flaky" {
  command = [%q]
  env     = { STAMP_FILE = %q, STAMP_SLEEP_MS = "100", STAMP_EXIT = "1" }
  restart {
    policy   = "always"
    delay    = "0s"
    attempts = 0
  }
%s
}
`, stampBin, stamps, body))
	m := startMariposa(b, agent, nil, append(append([]string{"-log-level", "warn"}, args...), hcl)...)
	var got []stamp
	waitFor(b, 2*time.Minute, fmt.Sprintf("%d restarts", trials), func() (bool, string) {
		got = readStamps(stamps)
		return countStarts(got) > trials, fmt.Sprintf("%d starts", countStarts(got))
	})
	m.stop(b, syscall.SIGTERM, 20*time.Second)
	return exitToStart(got)
}

// BenchmarkRestartCgroupCost: what a control group per instance adds to
// process exit -> restarted (BENCHMARKS.md: goal <= 0.2 ms): the same
// restarts without control groups (-cgroup-parent=none), with one (the
// cgroup2 tracking group: CLONE_INTO_CGROUP, an emptiness check at exit
// and at start), and with limits (cpu, memory, pids: on a v1 host three
// more hierarchies joined after each fork). Rounds alternate; the medians
// are over all rounds together.
func BenchmarkRestartCgroupCost(b *testing.B) {
	const trials = 60
	rounds := benchRounds(3)
	agent := consultest.NewDev(b)
	const limits = "  resources {\n    cpu    = 2000\n    memory = 512\n    pids   = 256\n  }"
	for i := 0; i < b.N; i++ {
		var none, group, limited latencies
		for range rounds {
			none = append(none, restartRound(b, agent, trials, "", "-cgroup-parent", "none")...)
			group = append(group, restartRound(b, agent, trials, "")...)
			limited = append(limited, restartRound(b, agent, trials, limits)...)
		}
		none.report(b, "process exit -> restarted, no control groups")
		group.report(b, "process exit -> restarted, a control group per instance")
		limited.report(b, "process exit -> restarted, a control group per instance with cpu, memory and pids limits")
		added, addedLimits := group.pct(0.5)-none.pct(0.5), limited.pct(0.5)-none.pct(0.5)
		fmt.Printf("a cgroup per instance on the restart path: p50 %.3f ms without, %.3f ms with (added %.3f ms), %.3f ms with limits (added %.3f ms); goal <= 0.2 ms added\n",
			ms(none.pct(0.5)), ms(group.pct(0.5)), ms(added), ms(limited.pct(0.5)), ms(addedLimits))
		b.ReportMetric(ms(added), "cgroup-added-p50-ms")
		b.ReportMetric(ms(addedLimits), "cgroup-limits-added-p50-ms")
	}
}
