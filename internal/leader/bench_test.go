package leader

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// BenchmarkFailover measures how long leadership takes to move, in the same
// run for the elector and for `consul lock` (Consul's defaults: session TTL
// 15s, lock delay 15s): from the moment the harness stops or kills the
// holder to the first instruction of the new leader's child, both on
// CLOCK_MONOTONIC (the child is internal/testchild, stamping its start).
//
//   - graceful: the elector's Run context ends (mariposa's SIGTERM path: stop
//     the child, release, destroy the session); `consul lock` gets SIGTERM.
//   - crash: the elector's network to its agent is cut and its liveness
//     heartbeats stop, as when mariposa is SIGKILLed (its child dies with it);
//     `consul lock` gets SIGKILL, and its child keeps running, which the
//     benchmark counts.
//
// MARIPOSA_BENCH_TRIALS (default 12) sets the trials of each case except
// crash/consul-lock, MARIPOSA_BENCH_LOCK_CRASH_TRIALS (default 3; about 45 s
// each) that one.
func BenchmarkFailover(b *testing.B) {
	agent := consultest.NewDev(b)
	child := buildTestchild(b)
	trials := benchEnvInt(b, "MARIPOSA_BENCH_TRIALS", 12)
	lockCrashTrials := benchEnvInt(b, "MARIPOSA_BENCH_LOCK_CRASH_TRIALS", 3)

	b.Run("graceful/mariposa", func(b *testing.B) {
		for range b.N {
			benchElector(b, agent, child, trials, false).report(b, "leader stops gracefully -> standby's child running (mariposa elector)")
		}
	})
	b.Run("graceful/consul-lock", func(b *testing.B) {
		for range b.N {
			l, _ := benchConsulLock(b, agent, child, trials, syscall.SIGTERM)
			l.report(b, "leader stops gracefully -> standby's child running (consul lock)")
		}
	})
	b.Run("crash/mariposa", func(b *testing.B) {
		for range b.N {
			benchElector(b, agent, child, trials, true).report(b, "leader crashes -> standby's child running (mariposa elector, liveness TTL 3s, lock_delay 1s)")
		}
	})
	b.Run("crash/consul-lock", func(b *testing.B) {
		for range b.N {
			l, alive := benchConsulLock(b, agent, child, lockCrashTrials, syscall.SIGKILL)
			l.report(b, fmt.Sprintf("leader crashes -> standby's child running (consul lock; old child still running in %d of %d)", alive, len(l)))
			b.ReportMetric(float64(alive), "old-child-alive")
		}
	})
}

// benchElector runs trials failovers between two in-process electors.
func benchElector(b *testing.B, agent *consultest.Agent, child string, trials int, crash bool) latencies {
	c := agent.Client(b)
	dir := b.TempDir()
	var lat latencies
	for i := range trials {
		key := fmt.Sprintf("bench/elector/%v/%d", crash, i)
		// The leader talks through a proxy (cut to simulate the crash), and
		// heartbeats its own liveness check through it.
		p := newProxy(b, agent.HTTPAddr())
		via := clientFor(b, p.Addr())
		lvA := consultest.StartLiveness(b, via, fmt.Sprintf("a%d", i))
		lvB := consultest.StartLiveness(b, c, fmt.Sprintf("b%d", i))
		stampA, stampB := filepath.Join(dir, fmt.Sprintf("a%d", i)), filepath.Join(dir, fmt.Sprintf("b%d", i))
		ctxA, stopA := context.WithCancel(context.Background())
		ctxB, stopB := context.WithCancel(context.Background())
		doneA, doneB := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(doneA)
			New(Config{Client: via, Key: key, Checks: []string{lvA.CheckID}}).Run(ctxA, childTerm(child, stampA))
		}()
		if !waitStamp(stampA, 0, 30*time.Second) {
			b.Fatalf("trial %d: a's child did not start", i)
		}
		go func() {
			defer close(doneB)
			New(Config{Client: c, Key: key, Checks: []string{lvB.CheckID}}).Run(ctxB, childTerm(child, stampB))
		}()
		if !consultest.WaitFor(10*time.Second, func() bool {
			ss, _, err := c.Session().List(nil)
			return err == nil && sessionsNamed(ss, "mariposa leader "+key) == 2
		}) {
			b.Fatalf("trial %d: b did not contend", i)
		}
		t0 := leadertest.Mono()
		if crash {
			p.Cut()
			lvA.Paused.Store(true)
		} else {
			stopA()
		}
		if !waitStamp(stampB, t0, 60*time.Second) {
			b.Fatalf("trial %d: b's child did not start", i)
		}
		lat = append(lat, firstStart(stampB, t0)-t0)
		stopA()
		stopB()
		<-doneB
		p.Restore()
		<-doneA
		// The old leader's child stopped before the new one started.
		if err := leadertest.CheckNoOverlap(append(stamps(stampA), stamps(stampB)...)); err != nil {
			b.Errorf("trial %d: %v", i, err)
		}
	}
	return lat
}

func sessionsNamed(ss []*api.SessionEntry, name string) int {
	n := 0
	for _, s := range ss {
		if s.Name == name {
			n++
		}
	}
	return n
}

// childTerm starts the leader-only child for the term and stops it (SIGTERM,
// then wait) when the term ends, as the supervisor does.
func childTerm(child, stampFile string) func(*Term) {
	return func(t *Term) {
		cmd := exec.Command(child, "-stamp-file", stampFile)
		if err := cmd.Start(); err != nil {
			<-t.Lost()
			return
		}
		<-t.Lost()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
}

// benchConsulLock runs trials failovers between two `consul lock` processes
// and counts the trials where the old child was still running once the new
// one started.
func benchConsulLock(b *testing.B, agent *consultest.Agent, child string, trials int, sig syscall.Signal) (latencies, int) {
	bin := consultest.RequireBinary(b)
	c := agent.Client(b)
	dir := b.TempDir()
	var lat latencies
	alive := 0
	for i := range trials {
		prefix := fmt.Sprintf("bench/consul-lock/%s/%d", sig, i)
		stampA, stampB := filepath.Join(dir, fmt.Sprintf("a%d", i)), filepath.Join(dir, fmt.Sprintf("b%d", i))
		lockA := startConsulLock(b, bin, agent.HTTPAddr(), prefix, child, stampA)
		if !waitStamp(stampA, 0, 30*time.Second) {
			b.Fatalf("trial %d: consul lock a's child did not start", i)
		}
		lockB := startConsulLock(b, bin, agent.HTTPAddr(), prefix, child, stampB)
		if !consultest.WaitFor(10*time.Second, func() bool {
			ss, _, err := c.Session().List(nil)
			return err == nil && sessionsNamed(ss, "bench "+prefix) == 2
		}) {
			b.Fatalf("trial %d: consul lock b did not contend", i)
		}
		childA := stampPID(stampA)
		t0 := leadertest.Mono()
		_ = lockA.Process.Signal(sig)
		if !waitStamp(stampB, t0, 5*time.Minute) {
			b.Fatalf("trial %d: consul lock b's child did not start", i)
		}
		lat = append(lat, firstStart(stampB, t0)-t0)
		if childA > 0 && consultest.ProcessAlive(childA) {
			alive++
			_ = syscall.Kill(childA, syscall.SIGKILL)
		}
		_ = lockB.Process.Signal(syscall.SIGTERM)
		waitProc(lockA)
		waitProc(lockB)
	}
	return lat, alive
}

func startConsulLock(b *testing.B, bin, addr, prefix, child, stampFile string) *exec.Cmd {
	cmd := exec.Command(bin, "lock", "-http-addr="+addr, "-shell=false", "-name=bench "+prefix,
		prefix, child, "-stamp-file", stampFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		if pid := stampPID(stampFile); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return cmd
}

// waitProc waits for cmd to exit, killing it after 30s.
func waitProc(cmd *exec.Cmd) {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func stamps(path string) []leadertest.Interval {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	ivs, _ := leadertest.ParseStamps(bytes.NewReader(b), "")
	return ivs
}

// firstStart is the first child start stamped in path at or after t0.
func firstStart(path string, t0 time.Duration) time.Duration {
	for _, iv := range stamps(path) {
		if iv.Start >= t0 {
			return iv.Start
		}
	}
	return 0
}

func waitStamp(path string, t0 time.Duration, timeout time.Duration) bool {
	return consultest.WaitFor(timeout, func() bool { return firstStart(path, t0) > 0 })
}

// stampPID is the PID of the first child stamped in path.
func stampPID(path string) int {
	ivs := stamps(path)
	if len(ivs) == 0 {
		return 0
	}
	var pid int
	fmt.Sscanf(ivs[0].Who, " pid %d", &pid)
	return pid
}

func buildTestchild(b *testing.B) string {
	b.Helper()
	out := filepath.Join(b.TempDir(), "testchild")
	cmd := exec.Command("go", "build", "-o", out, "github.com/mariposa-sh/mariposa/internal/testchild")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build testchild: %v\n%s", err, msg)
	}
	return out
}

func benchEnvInt(b *testing.B, name string, def int) int {
	if s := os.Getenv(name); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("%s=%q: want a positive number", name, s)
		}
		return v
	}
	return def
}

// latencies are one case's samples, in trial order.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	s := append(latencies(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[int(p*float64(len(s)-1)+0.5)]
}

func (l latencies) report(b *testing.B, what string) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Printf("%s: n=%d min=%.1fms median=%.1fms p90=%.1fms max=%.1fms\n",
		what, len(l), ms(l.pct(0)), ms(l.pct(0.5)), ms(l.pct(0.9)), ms(l.pct(1)))
	b.ReportMetric(ms(l.pct(0.5)), "median-ms")
	b.ReportMetric(ms(l.pct(1)), "max-ms")
	b.ReportMetric(0, "ns/op")
}
