//go:build soak

// The fleet's fault soak: `make soak` (SOAK=30m by default). The build tag
// keeps it out of `make test` and `make test-race`.

package e2e

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

var (
	soakFor  = flag.Duration("soak", 30*time.Minute, "how long TestFleetSoak injects faults")
	soakSeed = flag.Uint64("soak.seed", 0, "TestFleetSoak's seed for its choice of faults, victims and durations (0: from the clock); every run logs its own")
)

// The soak's two services and the counts a count change moves between.
const (
	soakExcl     = "excl" // exclusive, count 2 at first
	soakPool     = "pool" // not exclusive, count 3 at first
	soakExclMax  = 3
	soakPoolMax  = 4
	soakRecovery = 90 * time.Second // from the heal to both services whole again
	// soakSettle is how long every server must see every agent alive
	// before the next fault: longer than the longest suspicion timeout of
	// FastGossip on 8 agents (6 x 3 x log10(8), at least 1, x 300ms =
	// 5.4 s). A healed agent's pending suspicions can still make a server
	// mark healthy members failed that long after the heal, and Consul
	// then answers 500 to what that server forwards to the Raft leader.
	soakSettle = 6 * time.Second
)

// The kinds of fault, in the order the summary lists them.
const (
	faultKillMariposa = "kill-mariposa" // kill -9 of a node's mariposa, restarted after 0-10 s
	faultStopMariposa = "stop-mariposa" // SIGSTOP of a node's mariposa for 1-8 s, then SIGCONT
	faultKillAgent    = "kill-agent"    // kill -9 of a client's Consul agent, restarted after 2-15 s
	faultCut          = "cut"           // a client's agent cut off from the others for 5-30 s, then healed and rejoined
	faultCount        = "count"         // one service's count up or down by one, by deploying again
)

var soakFaults = []string{faultKillMariposa, faultStopMariposa, faultKillAgent, faultCut, faultCount}

// soakSlot is one exclusive slot on one node: the children's stamps of
// each go to a file of their own.
type soakSlot struct {
	node string
	slot int
}

// countChange is a change of the exclusive count: from at until the fleet
// was whole again (till), old or new children may run, so up to the larger
// of the two.
type countChange struct {
	at, till time.Duration // CLOCK_MONOTONIC
	old, new int
}

// soak is the state of one TestFleetSoak run.
type soak struct {
	t     *testing.T
	rng   *rand.Rand
	seed  uint64
	begin time.Time
	dir   string // stamps and the mariposas' logs; kept when the test fails
	cl    *consultest.Cluster
	c     *api.Client   // through the first server, as every read of the test
	srvs  []*api.Client // one per server, for their view of Serf
	ms    map[string]*mariposa
	count map[string]int
	excl  map[soakSlot]*childWatch // every exclusive slot that can exist, on every node
	pool  map[string]*childWatch   // the non-exclusive children, by node (max_per_node is 1)

	frozen    []frozenWindow
	changes   []countChange
	log       []string // the fault log
	recovered map[string]latencies

	deployRetries int
}

// The fleet under a long random sequence of faults (3 Consul servers, 5
// clients, a mariposa -cluster on each client), with an exclusive service
// (count 2) and a non-exclusive one (count 3): kill -9 of a mariposa,
// SIGSTOP/SIGCONT of one, kill -9 of a client's Consul agent, a network cut
// of a client for 5 to 30 seconds, and count changes up and down. After
// every fault, once it is healed, both services are whole again within 90
// seconds: every slot below the count held on a distinct node, none above
// it, exactly one child per held slot on its holder and none anywhere else,
// and exactly count instances registered, all passing, each on its slot's
// holder; and whole again once Consul has settled (every server seeing
// every agent alive for 6 s), which is when the next fault starts.
// Throughout, as measured from the children's own start and exit
// stamps: no two exclusive children ever ran one slot at once, and no more
// exclusive children than the count ran at once, outside the documented
// frozen window (a mariposa stopped by SIGSTOP, until it has acted after
// SIGCONT). Each fault is logged with its time; a summary gives per kind
// how many, the longest and the median recovery. The seed is logged:
// -soak.seed replays the same choices of fault kind, victim and duration
// (the victims are drawn from the holders as they are then, so a replay
// follows the same path as long as placement does).
func TestFleetSoak(t *testing.T) {
	if err := consultest.FirewallAvailable(); err != nil {
		t.Fatalf("the soak cuts agents off with nftables, as root: %v", err)
	}
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	dir, err := os.MkdirTemp("", "mariposa-soak-")
	if err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x6d61726970)), dir: dir,
		count: map[string]int{soakExcl: 2, soakPool: 3}, excl: map[soakSlot]*childWatch{},
		ms: map[string]*mariposa{}, recovered: map[string]latencies{}}
	t.Logf("soak: %s of faults, seed %d (replay: make soak SOAK=%s SOAK_SEED=%d)", *soakFor, seed, *soakFor, seed)
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
			return
		}
		t.Logf("soak FAILED after %s, seed %d (replay: make soak SOAK=%s SOAK_SEED=%d)\nfault log:\n%s\n%s\nstamps and logs (mariposa.<node>.log, consul.<node>.log) kept in %s",
			time.Since(s.begin).Round(time.Second), seed, *soakFor, seed, strings.Join(s.log, "\n"), strings.Join(s.summary(), "\n"), dir)
	})

	s.cl = consultest.NewFleet(t, consultest.FleetOptions{Servers: 3, Clients: 5})
	s.c = s.cl.Servers[0].Client(t)
	for _, srv := range s.cl.Servers {
		s.srvs = append(s.srvs, srv.Client(t))
	}
	// Runs before the agents' own cleanup kills them and removes their
	// directories: a failure keeps their logs next to the mariposas'.
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range s.cl.Agents() {
				copyFile(a.LogPath, filepath.Join(dir, "consul."+a.Name+".log"))
			}
		}
	})
	s.pool = clientWatches(t, s.cl, dir, soakPool)
	for _, a := range s.cl.Clients {
		for k := 0; k < soakExclMax; k++ {
			s.excl[soakSlot{a.Name, k}] = watchChildren(t, filepath.Join(dir, fmt.Sprintf("%s.%s.%d.stamps", soakExcl, a.Name, k)))
		}
		s.ms[a.Name] = s.startMariposa(a)
	}
	s.wait(60*time.Second, "every supervisor live", s.fleetLive)
	at := leadertest.Mono()
	s.deploy()
	s.begin = time.Now()
	s.wait(soakRecovery, "both services placed", s.whole)
	s.changes = append(s.changes, countChange{at: at, till: leadertest.Mono(), old: 0, new: s.count[soakExcl]})
	s.logf("deployed: %s count %d, %s count %d; placed %s", soakExcl, s.count[soakExcl], soakPool, s.count[soakPool], s.placement())

	s.settle("before the first fault")

	end := time.Now().Add(*soakFor)
	for i := 1; time.Now().Before(end); i++ {
		kind := soakFaults[s.rng.IntN(len(soakFaults))]
		healed := s.inject(i, kind)
		s.recover(i, kind, healed)
	}

	s.checkExclusive("at the end")
	n := 0
	for _, l := range s.recovered {
		n += len(l)
	}
	t.Logf("soak: %d faults in %s, seed %d; every one recovered within %s; %d deploy(s) failed and were tried again",
		n, time.Since(s.begin).Round(time.Second), seed, soakRecovery, s.deployRetries)
	for _, line := range s.summary() {
		t.Log(line)
	}
}

// recover waits, after fault i has healed, until both services are whole
// again (the recovery, timed from the heal); checks the exclusive
// service's runs so far; then waits until Consul has settled (see
// soakSettle) and the fleet is whole and live again, so the next fault
// starts from a fleet at rest.
func (s *soak) recover(i int, kind string, healed time.Time) {
	t := s.t
	t.Helper()
	waited := "nothing" // what recovery waited on last, for the fault log
	ok, last := s.poll(soakRecovery, 100*time.Millisecond, func() (bool, string) {
		ok, seen := s.whole()
		if !ok {
			waited = seen
		}
		return ok, seen
	})
	took := time.Since(healed)
	if !ok {
		s.logf("fault %d (%s): NOT recovered %s after the heal; last seen: %s", i, kind, soakRecovery, last)
		t.Fatalf("fault %d (%s): both services not whole %s after the heal; last seen: %s", i, kind, soakRecovery, last)
	}
	if c := &s.changes[len(s.changes)-1]; c.till == 0 {
		c.till = leadertest.Mono() // an exclusive count change has settled
	}
	s.recovered[kind] = append(s.recovered[kind], took)
	s.logf("fault %d (%s): recovered %s after the heal, last waiting on %s; placed %s", i, kind, took.Round(time.Millisecond), waited, s.placement())
	s.checkExclusive(fmt.Sprintf("after fault %d (%s)", i, kind))

	s.settle(fmt.Sprintf("after fault %d (%s)", i, kind))
	t0 := time.Now()
	waited = ""
	if ok, last := s.poll(soakRecovery, 100*time.Millisecond, func() (bool, string) {
		ok, seen := s.whole()
		if !ok {
			waited = seen
		}
		return ok, seen
	}); !ok {
		s.logf("fault %d (%s): disturbed again while Consul settled, NOT whole %s later; last seen: %s", i, kind, soakRecovery, last)
		t.Fatalf("fault %d (%s): both services not whole %s after Consul settled; last seen: %s", i, kind, soakRecovery, last)
	}
	if waited != "" {
		s.logf("fault %d (%s): disturbed again while Consul settled; whole again %s later, last waiting on %s; placed %s",
			i, kind, time.Since(t0).Round(time.Millisecond), waited, s.placement())
		s.checkExclusive(fmt.Sprintf("after fault %d (%s), settled", i, kind))
	}
	s.wait(60*time.Second, "every supervisor live again", s.fleetLive)
}

// settle waits until every server has seen every agent alive in Serf for
// soakSettle without a break.
func (s *soak) settle(when string) {
	var since time.Time
	s.wait(90*time.Second, fmt.Sprintf("%s: every server seeing every agent alive for %s", when, soakSettle), func() (bool, string) {
		for i, c := range s.srvs {
			ms, err := c.Agent().Members(false)
			if err != nil {
				since = time.Time{}
				return false, fmt.Sprintf("%s: %v", s.cl.Servers[i].Name, err)
			}
			var notAlive []string
			for _, m := range ms {
				if m.Status != 1 { // serf.StatusAlive
					notAlive = append(notAlive, fmt.Sprintf("%s (status %d)", m.Name, m.Status))
				}
			}
			if len(ms) != len(s.cl.Agents()) || len(notAlive) > 0 {
				since = time.Time{}
				return false, fmt.Sprintf("%s sees %d members, not alive: %v", s.cl.Servers[i].Name, len(ms), notAlive)
			}
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= soakSettle, fmt.Sprintf("all alive for %s", time.Since(since).Round(time.Millisecond))
	})
}

// deploy runs `mariposa deploy` of the spec at the current counts through
// the first server, as deploy does, trying again every second for up to
// 30 s while it fails: a server may fail to forward to the Raft leader for
// a moment (Consul answers 500), and the failure is what a user would see,
// so each one goes into the fault log and the summary.
func (s *soak) deploy() {
	t := s.t
	t.Helper()
	file := s.spec()
	var out []byte
	ok, last := s.poll(30*time.Second, time.Second, func() (bool, string) {
		var err error
		out, err = exec.Command(mariposaBin, "deploy", "-force", "-consul-addr", s.cl.Servers[0].HTTPAddr(), file).CombinedOutput()
		if err != nil {
			s.deployRetries++
			s.logf("mariposa deploy failed, trying again: %v: %s", err, strings.TrimSpace(string(out)))
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		return true, ""
	})
	if !ok {
		t.Fatalf("mariposa deploy failed for 30 s: %s", last)
	}
}

// inject runs fault i of the kind, heals it, and returns when it healed.
func (s *soak) inject(i int, kind string) (healed time.Time) {
	t := s.t
	switch kind {
	case faultKillMariposa:
		v := s.victim()
		down := s.between(0, 10*time.Second)
		s.logf("fault %d: %s on %s (holds %s), down for %s", i, kind, v, s.holdings(v), down)
		m := s.ms[v]
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.done
		time.Sleep(down) // the fault itself: how long the node has no mariposa
		s.ms[v] = s.startMariposa(s.cl.Agent(v))
		return time.Now()
	case faultStopMariposa:
		v := s.victim()
		frozen := s.between(time.Second, 8*time.Second)
		s.logf("fault %d: %s on %s (holds %s) for %s", i, kind, v, s.holdings(v), frozen)
		from := leadertest.Mono()
		_ = s.ms[v].cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(frozen) // the fault itself
		_ = s.ms[v].cmd.Process.Signal(syscall.SIGCONT)
		healed = time.Now()
		// The frozen window ends once the resumed mariposa has acted: no
		// exclusive child left on a slot the node no longer holds.
		s.wait(10*time.Second, "the resumed "+v+" running no exclusive child of a slot it lost", func() (bool, string) {
			h := slotHolders(t, s.c, soakExcl)
			if h == nil {
				return false, "slots unreadable"
			}
			for k := 0; k < soakExclMax; k++ {
				if r := s.excl[soakSlot{v, k}].running(); len(r) > 0 && h[k] != v {
					return false, fmt.Sprintf("%s/%d held by %q, %s still runs %v", soakExcl, k, h[k], v, r)
				}
			}
			return true, ""
		})
		s.frozen = append(s.frozen, frozenWindow{node: v, from: from, till: leadertest.Mono()})
		return healed
	case faultKillAgent:
		v := s.victim()
		down := s.between(2*time.Second, 15*time.Second)
		s.logf("fault %d: %s on %s (holds %s), down for %s", i, kind, v, s.holdings(v), down)
		a := s.cl.Agent(v)
		a.Kill()
		time.Sleep(down) // the fault itself
		a.Start(t)       // it joins the servers again by itself (-retry-join)
		return time.Now()
	case faultCut:
		v := s.victim()
		cut := s.between(5*time.Second, 30*time.Second)
		s.logf("fault %d: %s of %s (holds %s) for %s", i, kind, v, s.holdings(v), cut)
		a := s.cl.Agent(v)
		a.Cut(t)
		time.Sleep(cut) // the fault itself
		a.Heal(t)
		s.cl.Rejoin(t, a)
		return time.Now()
	case faultCount:
		svc, top := soakExcl, soakExclMax
		if s.rng.IntN(2) == 0 {
			svc, top = soakPool, soakPoolMax
		}
		old := s.count[svc]
		n := old + 1
		if n > top || (old > 1 && s.rng.IntN(2) == 0) {
			n = old - 1
		}
		s.logf("fault %d: %s of %s from %d to %d (placed %s)", i, kind, svc, old, n, s.placement())
		s.count[svc] = n
		if svc == soakExcl {
			s.changes = append(s.changes, countChange{at: leadertest.Mono(), old: old, new: n})
		}
		s.deploy()
		return time.Now()
	}
	t.Fatalf("unknown fault %q", kind)
	return time.Time{}
}

// spec is the deployment at the current counts. The children stamp their
// starts and stops: exclusive ones one file per node and slot, the others
// one file per node.
func (s *soak) spec() string {
	return writeHCL(s.t, fmt.Sprintf(`
service %[1]q {
  command   = ["/bin/sh", "-c", "exec %[3]s -stamp-file %[4]s/%[1]s.$MARIPOSA_NODE.$MARIPOSA_INSTANCE.stamps"]
  count     = %[5]d
  exclusive = true
  stop {
    timeout = "2s"
  }
}

service %[2]q {
  command = ["/bin/sh", "-c", "exec %[3]s -stamp-file %[4]s/%[2]s.$MARIPOSA_NODE.stamps"]
  count   = %[6]d
  stop {
    timeout = "2s"
  }
}
`, soakExcl, soakPool, childBin, s.dir, s.count[soakExcl], s.count[soakPool]))
}

// startMariposa runs `mariposa run -cluster` next to agent, as fleetOf
// does, but with its output appended to mariposa.<node>.log in the soak's
// directory: half an hour of debug logs is too much to keep in memory and
// print into the test's output, and a failure keeps the files.
func (s *soak) startMariposa(agent *consultest.Agent) *mariposa {
	t := s.t
	t.Helper()
	f, err := os.OpenFile(filepath.Join(s.dir, "mariposa."+agent.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "=== %s: mariposa run -cluster starts\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(mariposaBin, "run", "-consul-addr", agent.HTTPAddr(), "-log-level", "debug", "-cluster")
	cmd.Stdout, cmd.Stderr = f, f
	sock := controlSocket(t)
	cmd.Env = append(os.Environ(), "MARIPOSA_CONTROL_SOCKET="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mariposa{cmd: cmd, done: make(chan struct{}), sock: sock}
	go func() { m.err = cmd.Wait(); f.Close(); close(m.done) }()
	t.Cleanup(func() {
		if !m.exited() {
			_ = cmd.Process.Kill()
			<-m.done
		}
	})
	return m
}

// whole reports whether both services are at their count: slots 0 to
// count-1 held on distinct nodes and none above, one child per held slot on
// its holder and no other, count instances registered, all passing, each
// on its slot's holder.
func (s *soak) whole() (bool, string) {
	for _, svc := range []string{soakExcl, soakPool} {
		n := s.count[svc]
		h := slotHolders(s.t, s.c, svc)
		if h == nil {
			return false, svc + ": slots unreadable"
		}
		on := map[string]int{} // node -> its slot
		for k := 0; k < n; k++ {
			node := h[k]
			if node == "" {
				return false, fmt.Sprintf("%s/%d free (%v)", svc, k, h)
			}
			if _, two := on[node]; two {
				return false, fmt.Sprintf("%s: two slots on %s (%v)", svc, node, h)
			}
			on[node] = k
		}
		for k, node := range h {
			if k >= n && node != "" {
				return false, fmt.Sprintf("%s/%d above the count %d held by %s", svc, k, n, node)
			}
		}
		for _, a := range s.cl.Clients {
			k, holds := on[a.Name]
			if svc == soakPool {
				want := 0
				if holds {
					want = 1
				}
				if r := s.pool[a.Name].running(); len(r) != want {
					return false, fmt.Sprintf("%s: %s runs %v, holds %d slot(s)", svc, a.Name, r, want)
				}
				continue
			}
			for j := 0; j < soakExclMax; j++ {
				want := 0
				if holds && j == k {
					want = 1
				}
				if r := s.excl[soakSlot{a.Name, j}].running(); len(r) != want {
					return false, fmt.Sprintf("%s/%d: %s runs %v, want %d child(ren) (%v)", svc, j, a.Name, r, want, h)
				}
			}
		}
		es, _, err := s.c.Health().Service(svc, "", false, nil)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", svc, err)
		}
		var seen []string
		passing := 0
		for _, e := range es {
			k, _ := strconv.Atoi(e.Service.Meta["slot"])
			st := e.Checks.AggregatedStatus()
			seen = append(seen, fmt.Sprintf("%s/%s on %s %s", svc, e.Service.Meta["slot"], e.Node.Node, st))
			if e.Node.Node != h[k] {
				return false, fmt.Sprintf("%s: registered %v, slots %v", svc, seen, h)
			}
			if st == api.HealthPassing {
				passing++
			}
		}
		if len(es) != n || passing != n {
			return false, fmt.Sprintf("%s: registered %v, want %d passing", svc, seen, n)
		}
	}
	return true, ""
}

// fleetLive reports whether every node's mariposa is live in Consul.
func (s *soak) fleetLive() (bool, string) {
	live := passingInstances(s.c, "mariposa")
	return len(live) == len(s.cl.Clients), fmt.Sprintf("%d of %d live", len(live), len(s.cl.Clients))
}

// checkExclusive fails the test if, from the children's stamps, two
// exclusive children ran one slot at once, or more ran at once than the
// count allowed, outside a frozen window.
func (s *soak) checkExclusive(when string) {
	t := s.t
	t.Helper()
	type run struct {
		leadertest.Interval
		node string
		slot int
	}
	var all []run
	for ns, w := range s.excl {
		for _, iv := range w.intervals(t) {
			all = append(all, run{Interval: iv, node: ns.node, slot: ns.slot})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Start < all[j].Start })
	now := leadertest.Mono()
	stop := func(r run) time.Duration {
		if r.Stop == 0 {
			return now
		}
		return r.Stop
	}
	// frozenAt: node's mariposa was in a frozen window over [a, b] (with
	// the second of slack the fleet tests give the child watch).
	frozenAt := func(node string, a, b time.Duration) bool {
		for _, f := range s.frozen {
			if f.node == node && a >= f.from && b <= f.till+time.Second {
				return true
			}
		}
		return false
	}
	var bad []string
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			a, b := all[i], all[j]
			if a.slot != b.slot || !overlaps(a.Interval, b.Interval) {
				continue
			}
			from, till := max(a.Start, b.Start), min(stop(a), stop(b))
			if frozenAt(a.node, from, till) || frozenAt(b.node, from, till) {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s/%d ran twice at once: %s %s and %s %s", soakExcl, a.slot, a.node, a.Interval, b.node, b.Interval))
		}
	}
	// Concurrency only grows at a start: count what runs at each.
	for _, r := range all {
		at := r.Start
		var running []string
		for _, o := range all {
			if o.Start <= at && at < stop(o) && !frozenAt(o.node, at, at) {
				running = append(running, fmt.Sprintf("%s/%d on %s (%s)", soakExcl, o.slot, o.node, o.Who))
			}
		}
		if allowed := s.exclAllowed(at); len(running) > allowed {
			bad = append(bad, fmt.Sprintf("%d exclusive children at once, count %d: %v", len(running), allowed, running))
		}
	}
	if len(bad) > 0 {
		s.logf("%s: the exclusive service's runs broke its guarantee", when)
		for _, r := range all {
			t.Logf("run: %s/%d on %s: %s", soakExcl, r.slot, r.node, r.Interval)
		}
		t.Fatalf("%s:\n%s", when, strings.Join(bad, "\n"))
	}
}

// exclAllowed is how many exclusive children may run at the monotonic time
// at: the count then, or the larger of old and new while a change settles.
func (s *soak) exclAllowed(at time.Duration) int {
	allowed := 0
	for _, c := range s.changes {
		if c.at > at {
			break
		}
		allowed = c.new
		if c.till == 0 || at <= c.till {
			allowed = max(c.old, c.new)
		}
	}
	return allowed
}

// victim picks the node a fault hits: half the time a holder of an
// exclusive slot, otherwise any client.
func (s *soak) victim() string {
	if s.rng.IntN(2) == 0 {
		var holders []string
		h := slotHolders(s.t, s.c, soakExcl)
		for k := 0; k < s.count[soakExcl]; k++ {
			if h[k] != "" {
				holders = append(holders, h[k])
			}
		}
		if len(holders) > 0 {
			return holders[s.rng.IntN(len(holders))]
		}
	}
	return s.cl.Clients[s.rng.IntN(len(s.cl.Clients))].Name
}

// holdings names the slots node holds.
func (s *soak) holdings(node string) string {
	var held []string
	for _, svc := range []string{soakExcl, soakPool} {
		for k, n := range slotHolders(s.t, s.c, svc) {
			if n == node {
				held = append(held, fmt.Sprintf("%s/%d", svc, k))
			}
		}
	}
	sort.Strings(held)
	if len(held) == 0 {
		return "no slot"
	}
	return strings.Join(held, " ")
}

// placement is where every held slot is: "excl/0=client-1 ...".
func (s *soak) placement() string {
	var out []string
	for _, svc := range []string{soakExcl, soakPool} {
		h := slotHolders(s.t, s.c, svc)
		ks := make([]int, 0, len(h))
		for k := range h {
			ks = append(ks, k)
		}
		sort.Ints(ks)
		for _, k := range ks {
			if h[k] != "" {
				out = append(out, fmt.Sprintf("%s/%d=%s", svc, k, h[k]))
			}
		}
	}
	return strings.Join(out, " ")
}

// between is a random duration in [lo, hi), to the millisecond.
func (s *soak) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64((hi-lo)/time.Millisecond)))*time.Millisecond
}

// logf adds a line to the fault log, with the time and the offset into the
// soak, and logs it.
func (s *soak) logf(format string, args ...any) {
	var off time.Duration
	if !s.begin.IsZero() {
		off = time.Since(s.begin).Round(time.Millisecond)
	}
	line := fmt.Sprintf("%s +%s %s", time.Now().Format("15:04:05.000"), off, fmt.Sprintf(format, args...))
	s.log = append(s.log, line)
	s.t.Log(line)
}

// poll checks cond every interval (not every 10 ms as waitFor: a check
// can cost several Consul reads) until it holds or timeout passes; it
// returns what cond saw last.
func (s *soak) poll(timeout, interval time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok || time.Now().After(deadline) {
			return ok, seen
		}
		time.Sleep(interval)
	}
}

// wait is waitFor, polling as poll does, with the fault log on failure.
func (s *soak) wait(timeout time.Duration, what string, cond func() (bool, string)) {
	s.t.Helper()
	if ok, last := s.poll(timeout, 100*time.Millisecond, cond); !ok {
		s.logf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
		s.t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
	}
}

// summary is one line per kind of fault: how many, the longest and the
// median recovery (from the heal to both services whole).
func (s *soak) summary() []string {
	out := []string{fmt.Sprintf("%-14s %5s %10s %10s", "FAULT", "N", "MAX", "P50")}
	for _, kind := range soakFaults {
		l := s.recovered[kind]
		if len(l) == 0 {
			out = append(out, fmt.Sprintf("%-14s %5d %10s %10s", kind, 0, "-", "-"))
			continue
		}
		out = append(out, fmt.Sprintf("%-14s %5d %10s %10s", kind, len(l),
			l.pct(1).Round(time.Millisecond), l.pct(0.5).Round(time.Millisecond)))
	}
	return out
}

func copyFile(from, to string) {
	in, err := os.Open(from)
	if err != nil {
		return
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return
	}
	defer out.Close()
	_, _ = io.Copy(out, in)
}
