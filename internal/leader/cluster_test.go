package leader

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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

// slot is one mariposa stand-in: an elector on one client agent, talking to
// it through a proxy that can cut the network, with its liveness check
// heartbeated through the same proxy.
type slot struct {
	name   string
	agent  *consultest.Agent
	proxy  *proxy
	direct *api.Client
	live   *consultest.Liveness
	cfg    Config
	c      *contender
}

type clusterEnv struct {
	cl      *consultest.Cluster
	servers []*api.Client // one per server agent, in cl.Servers' order
	slots   []*slot
	rec     leadertest.Recorder
	all     allTerms
	// retired contenders were stopped by a fault and replaced.
	retired []*contender
	// killedServer is the server a fault killed, until restored.
	killedServer *consultest.Agent
}

func newClusterEnv(t *testing.T, key string) *clusterEnv {
	t.Helper()
	consultest.SkipShort(t, "cluster test in -short mode")
	env := &clusterEnv{cl: consultest.NewCluster(t, 3, 2)}
	for _, a := range env.cl.Servers {
		env.servers = append(env.servers, a.Client(t))
	}
	for _, a := range env.cl.Clients {
		s := &slot{name: a.Name, agent: a, proxy: newProxy(t, a.HTTPAddr()), direct: a.Client(t)}
		via := clientFor(t, s.proxy.Addr())
		s.live = consultest.StartLiveness(t, via, a.Name)
		s.cfg = Config{Client: via, Key: key, Checks: []string{s.live.CheckID}, Log: consultest.Logger(t, a.Name)}
		env.slots = append(env.slots, s)
	}
	return env
}

func (env *clusterEnv) start(t *testing.T, s *slot) {
	s.c = startContender(t, s.name, s.cfg, &env.rec, &env.all)
}

// leader waits until some slot leads and returns it and its term.
func (env *clusterEnv) leader(t *testing.T, timeout time.Duration) (*slot, *Term) {
	t.Helper()
	var ls *slot
	var lt *Term
	if !consultest.WaitFor(timeout, func() bool {
		for _, s := range env.slots {
			if tm := s.c.term(); tm != nil && !tm.isExpired() && tm.Err() == nil {
				ls, lt = s, tm
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no leader within %v", timeout)
	}
	return ls, lt
}

// server returns a client of a running server agent.
func (env *clusterEnv) server() *api.Client {
	for i, a := range env.cl.Servers {
		if a.PID() != 0 {
			return env.servers[i]
		}
	}
	return env.servers[0]
}

// raftLeader returns the server agent that is the Raft leader.
func (env *clusterEnv) raftLeader(t *testing.T) *consultest.Agent {
	t.Helper()
	var leader *consultest.Agent
	if !consultest.WaitFor(30*time.Second, func() bool {
		addr, err := env.server().Status().Leader()
		if err != nil {
			return false
		}
		for _, a := range env.cl.Servers {
			if addr == fmt.Sprintf("127.0.0.1:%d", a.Ports.Server) {
				leader = a
				return true
			}
		}
		return false
	}) {
		t.Fatal("no Raft leader")
	}
	return leader
}

func (env *clusterEnv) other(s *slot) *slot {
	for _, o := range env.slots {
		if o != s {
			return o
		}
	}
	return nil
}

// hasSession waits until s's node has a session in Consul (s contends).
func (env *clusterEnv) hasSession(s *slot, timeout time.Duration) bool {
	return consultest.WaitFor(timeout, func() bool {
		ss, _, err := env.server().Session().Node(s.name, nil)
		return err == nil && len(ss) > 0
	})
}

// records returns every term of every slot, by start time.
func (env *clusterEnv) records() []termRec {
	var all []termRec
	for _, s := range env.slots {
		all = append(all, s.c.records()...)
	}
	for _, s := range env.retired {
		all = append(all, s.records()...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].start < all[j].start })
	return all
}

// TestAgentKilled: the leader's agent is killed (kill -9). The leader stops
// trusting the lock long before Serf declares the node failed and Consul
// invalidates its session; the standby on the other client agent takes over
// only after that, and after the old leader's deadline.
func TestAgentKilled(t *testing.T) {
	env := newClusterEnv(t, "mariposa/leader/killed")
	a, b := env.slots[0], env.slots[1]
	env.start(t, a)
	ta := a.c.waitTerm(t, 30*time.Second)
	env.start(t, b)
	if !env.hasSession(b, 30*time.Second) {
		t.Fatal("b did not contend")
	}

	t0 := time.Now()
	a.agent.Kill()
	waitClosed(t, ta.Expired(), 10*time.Second, "a's term after its agent was killed")
	lostAfter := time.Since(t0)
	tb := b.c.waitTerm(t, 90*time.Second)
	t.Logf("agent killed: a lost after %v (%v); b leads after %v", lostAfter, ta.Err(), time.Since(t0))
	if !tb.Started.After(ta.Deadline()) {
		t.Errorf("b's term confirmed at %v, before a's deadline %v", tb.Started, ta.Deadline())
	}
	if err := leadertest.CheckNoOverlap(env.rec.Intervals()); err != nil {
		t.Fatal(err)
	}

	// a's agent comes back: a contends again, as a standby, with a new session.
	a.agent.Start(t)
	if !env.hasSession(a, 60*time.Second) {
		t.Fatal("a did not contend again after its agent came back")
	}
	if a.c.term() != nil {
		t.Fatal("a leads while b does")
	}
}

// TestNetworkCut: the network between the leader and its agent is cut (the
// connections hang). The leader's term expires for want of confirmation;
// Consul invalidates its session when the liveness check it can no longer
// heartbeat goes critical, and only then does the standby lead.
func TestNetworkCut(t *testing.T) {
	agent, c, live := devSetup(t)
	const key = "mariposa/leader/cut"
	var rec leadertest.Recorder
	p := newProxy(t, agent.HTTPAddr())
	via := clientFor(t, p.Addr())
	lv := consultest.StartLiveness(t, via, "cut")
	a := startContender(t, "a", Config{Client: via, Key: key, Checks: []string{lv.CheckID}}, &rec, nil)
	ta := a.waitTerm(t, 20*time.Second)
	b := startContender(t, "b", cfgFor(c, key, live["b"]), &rec, nil)

	t0 := time.Now()
	p.Cut()
	waitClosed(t, ta.Expired(), 5*time.Second, "a's term after the cut")
	lostAfter := time.Since(t0)
	if !errors.Is(ta.Err(), ErrUnconfirmed) {
		t.Errorf("a lost with %v, want ErrUnconfirmed", ta.Err())
	}
	tb := b.waitTerm(t, 30*time.Second)
	t.Logf("network cut: a lost after %v; b leads after %v", lostAfter, time.Since(t0))
	if !tb.Started.After(ta.Deadline()) {
		t.Errorf("b's term confirmed at %v, before a's deadline %v", tb.Started, ta.Deadline())
	}
	p.Restore()
	if err := leadertest.CheckNoOverlap(rec.Intervals()); err != nil {
		t.Fatal(err)
	}
}

// fault is one kind of injected fault. apply breaks the leader l; restore
// repairs it once leadership moved (or was regained). invalidates says
// Consul invalidates the leader's session (so the next term must start after
// its deadline); away says the faulted slot cannot lead again before restore.
type fault struct {
	name        string
	invalidates bool
	away        bool
	survives    bool                                // the leader's term must ride the fault (no new term)
	ready       func(t *testing.T, env *clusterEnv) // waits until the fault can be injected
	apply       func(t *testing.T, env *clusterEnv, l *slot, tm *Term)
	restore     func(t *testing.T, env *clusterEnv, l *slot)
}

var faults = []fault{
	{name: "graceful stop", apply: func(t *testing.T, env *clusterEnv, l *slot, _ *Term) {
		l.c.stop(t)
		env.retired = append(env.retired, l.c)
		env.start(t, l)
	}},
	{name: "session destroyed", invalidates: true, apply: func(t *testing.T, env *clusterEnv, _ *slot, tm *Term) {
		if _, err := env.server().Session().Destroy(tm.Session, nil); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "liveness critical", invalidates: true, away: true, apply: func(t *testing.T, env *clusterEnv, l *slot, _ *Term) {
		l.live.Paused.Store(true)
		if err := l.direct.Agent().UpdateTTL(l.live.CheckID, "fault", api.HealthCritical); err != nil {
			t.Fatal(err)
		}
	}, restore: func(t *testing.T, env *clusterEnv, l *slot) { l.live.Paused.Store(false) }},
	{name: "network cut", invalidates: true, away: true, apply: func(t *testing.T, env *clusterEnv, l *slot, _ *Term) {
		l.proxy.Cut()
	}, restore: func(t *testing.T, env *clusterEnv, l *slot) { l.proxy.Restore() }},
	{name: "agent killed", invalidates: true, away: true, apply: func(t *testing.T, env *clusterEnv, l *slot, _ *Term) {
		l.agent.Kill()
	}, restore: func(t *testing.T, env *clusterEnv, l *slot) { l.agent.Start(t) }},
	{name: "agent stopped", invalidates: true, away: true, apply: func(t *testing.T, env *clusterEnv, l *slot, _ *Term) {
		if err := syscall.Kill(l.agent.PID(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}, restore: func(t *testing.T, env *clusterEnv, l *slot) {
		if err := syscall.Kill(l.agent.PID(), syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "clock jump", apply: func(t *testing.T, env *clusterEnv, l *slot, _ *Term) {
		l.c.clock.Jump(time.Hour)
	}},
	// No confirmation is possible while the servers elect a new leader,
	// but their answers say so: the term rides the election (issue 33).
	{name: "raft leader killed", survives: true, ready: func(t *testing.T, env *clusterEnv) {
		// A restarted server is a voter again only once autopilot says
		// so; killing the leader before would leave no quorum.
		if !consultest.WaitFor(90*time.Second, func() bool {
			h, err := env.server().Operator().AutopilotServerHealth(nil)
			return err == nil && h.Healthy && h.FailureTolerance >= 1
		}) {
			t.Fatal("the servers cannot tolerate a failure")
		}
	}, apply: func(t *testing.T, env *clusterEnv, _ *slot, _ *Term) {
		env.killedServer = env.raftLeader(t)
		env.killedServer.Kill()
	}, restore: func(t *testing.T, env *clusterEnv, _ *slot) {
		env.killedServer.Start(t)
		env.killedServer = nil
	}},
}

// waitConfirmedThrough waits until the servers have a leader again and l's
// term tm (still held) was confirmed by a read sent after that: the
// election is over, and whatever it did to the term is known.
func (env *clusterEnv) waitConfirmedThrough(t *testing.T, l *slot, tm *Term) {
	t.Helper()
	env.raftLeader(t)
	after := l.c.clock.Now()
	if !consultest.WaitFor(60*time.Second, func() bool {
		return tm.Err() != nil || tm.LastConfirmed().After(after)
	}) {
		t.Fatalf("%s's term was not confirmed after the election", l.name)
	}
}

// TestRaftLeaderElection (issue 33): the leading Consul server is killed
// (kill -9), and separately stopped and started again as in a rolling
// upgrade; the servers elect a new leader meanwhile. The leader-mode term
// rides it: same session, same fencing index, no new term anywhere. With
// the strict rule (Config.Detect < 0) the same election ends the term
// (mutation-checked).
func TestRaftLeaderElection(t *testing.T) {
	env := newClusterEnv(t, "mariposa/leader/election")
	for _, s := range env.slots {
		env.start(t, s)
	}
	healthy := func() {
		if !consultest.WaitFor(90*time.Second, func() bool {
			h, err := env.server().Operator().AutopilotServerHealth(nil)
			return err == nil && h.Healthy && h.FailureTolerance >= 1
		}) {
			t.Fatal("the servers cannot tolerate a failure")
		}
	}
	l, tm := env.leader(t, 60*time.Second)
	before := env.all.count()
	for _, how := range []string{"killed", "restarted"} {
		healthy()
		srv := env.raftLeader(t)
		t0 := time.Now()
		if how == "killed" {
			srv.Kill()
		} else {
			srv.Stop()
			srv.StartNoWait(t)
		}
		env.waitConfirmedThrough(t, l, tm)
		t.Logf("leading server %s: new Raft leader %s, term confirmed again after %v", how,
			env.raftLeader(t).Name, time.Since(t0).Round(time.Millisecond))
		if err := tm.Err(); err != nil {
			t.Fatalf("leading server %s: the term ended: %v", how, err)
		}
		if how == "killed" {
			srv.Start(t)
		} else {
			srv.WaitReady(t, 60*time.Second)
		}
	}
	if n := env.all.count(); n != before {
		t.Fatalf("%d new terms during the elections", n-before)
	}
	if h, err := Lookup(t.Context(), env.server(), "mariposa/leader/election"); err != nil || h.Session != tm.Session || h.Index != tm.Index {
		t.Fatalf("the key is held by %+v (%v), want session %s index %d", h, err, tm.Session, tm.Index)
	}
}

// TestFaultLoop injects random faults into whichever elector leads, across
// a real cluster (3 servers, 2 clients), and checks that no two terms ever
// overlap. MARIPOSA_LEADER_FAULTS sets the number of faults (default 16, each
// kind twice on average), MARIPOSA_LEADER_SEED the seed, and
// MARIPOSA_LEADER_FAULT_KINDS (comma-separated names) limits the kinds.
func TestFaultLoop(t *testing.T) {
	n := envInt(t, "MARIPOSA_LEADER_FAULTS", 16)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MARIPOSA_LEADER_SEED"); s != "" {
		seed = uint64(envInt(t, "MARIPOSA_LEADER_SEED", 0))
	}
	t.Logf("%d faults, MARIPOSA_LEADER_SEED=%d", n, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	kinds := faults
	if only := os.Getenv("MARIPOSA_LEADER_FAULT_KINDS"); only != "" {
		kinds = nil
		for _, f := range faults {
			if strings.Contains(only, f.name) {
				kinds = append(kinds, f)
			}
		}
		if len(kinds) == 0 {
			t.Fatalf("MARIPOSA_LEADER_FAULT_KINDS=%q names no fault", only)
		}
	}

	env := newClusterEnv(t, "mariposa/leader/faults")
	for _, s := range env.slots {
		env.start(t, s)
	}
	type result struct {
		fault          string
		lost, failover time.Duration
		from, to       string
	}
	var results []result
	spurious := 0
	for i := 0; i < n; {
		f := kinds[rng.IntN(len(kinds))]
		if f.ready != nil {
			f.ready(t, env)
		}
		l, tm := env.leader(t, 90*time.Second)
		if !env.hasSession(env.other(l), 90*time.Second) {
			t.Fatalf("fault %d: no standby contends", i)
		}
		before := env.all.count()
		t0, m0 := time.Now(), leadertest.Mono()
		if tm.Err() != nil {
			// Lost on its own (a confirmation came too late under load):
			// fault the next term instead.
			spurious++
			continue
		}
		f.apply(t, env, l, tm)
		if f.survives {
			env.waitConfirmedThrough(t, l, tm)
			if err := tm.Err(); err != nil {
				t.Errorf("fault %d (%s): the term ended: %v", i, f.name, err)
			}
			if env.all.count() != before {
				t.Errorf("fault %d (%s): a new term began", i, f.name)
			}
			t.Logf("fault %d: %s on %s: the term rode it", i, f.name, l.name)
			if f.restore != nil {
				f.restore(t, env, l)
			}
			i++
			continue
		}
		waitClosed(t, tm.Lost(), 10*time.Second, fmt.Sprintf("fault %d (%s): the leader's term", i, f.name))
		lost := time.Since(t0)
		if !consultest.WaitFor(90*time.Second, func() bool { return env.all.count() > before }) {
			t.Fatalf("fault %d (%s): no new term within 90s", i, f.name)
		}
		r := result{fault: f.name, lost: lost, failover: time.Since(t0), from: l.name, to: env.all.last()}
		results = append(results, r)
		t.Logf("fault %d: %s on %s: lost after %v (%v), %s leads after %v",
			i, f.name, l.name, lost.Round(time.Millisecond), tm.Err(), r.to, r.failover.Round(time.Millisecond))
		// The orderings below hold for the term the fault hit, not for one
		// that ended by itself just before (and was released by its own
		// elector once its work stopped).
		prev := env.recordOf(t, tm.Session)
		if prev.stop < m0 {
			spurious++
			t.Logf("fault %d: the term had ended just before the fault", i)
		} else {
			if f.away && r.to == l.name {
				t.Errorf("fault %d (%s): %s led again before the fault was repaired", i, f.name, l.name)
			}
			if f.invalidates {
				checkAfterDeadline(t, env, prev)
			}
		}
		if f.restore != nil {
			f.restore(t, env, l)
		}
		i++
	}
	t.Logf("%d terms ended by themselves (late confirmations under load)", spurious)
	for _, s := range env.slots {
		s.c.stop(t)
	}

	recs := env.records()
	sessions := map[string]bool{}
	for _, r := range recs {
		if sessions[r.session] {
			t.Errorf("session %s led twice", r.session)
		}
		sessions[r.session] = true
	}
	if err := leadertest.CheckNoOverlap(env.rec.Intervals()); err != nil {
		for _, r := range recs {
			t.Log(r)
		}
		t.Fatal(err)
	}
	byFault := map[string][]string{}
	for _, r := range results {
		byFault[r.fault] = append(byFault[r.fault], r.failover.Round(10*time.Millisecond).String())
	}
	for name, fs := range byFault {
		t.Logf("%-18s failovers: %s", name, strings.Join(fs, " "))
	}
	t.Logf("%d terms, no overlap", len(recs))
}

// recordOf waits for the record of the ended term of session (its handler
// completes it right after Lost closes).
func (env *clusterEnv) recordOf(t *testing.T, session string) termRec {
	t.Helper()
	var rec termRec
	if !consultest.WaitFor(10*time.Second, func() bool {
		for _, r := range env.records() {
			if r.session == session && r.stop != 0 {
				rec = r
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no record of the term of session %s", session)
	}
	return rec
}

// checkAfterDeadline: Consul invalidated prev's session after its last
// confirmation, so whoever leads next confirmed its lock after prev's
// deadline (last confirmation + lock delay).
func checkAfterDeadline(t *testing.T, env *clusterEnv, prev termRec) {
	t.Helper()
	var next *termRec
	for _, r := range env.records() {
		if r.start > prev.start && r.session != prev.session {
			next = &r
			break
		}
	}
	if next == nil {
		return
	}
	deadline := prev.stop + prev.deadlineD
	if next.start < deadline-time.Millisecond {
		t.Errorf("%s started %v before %s's deadline", next.who, deadline-next.start, prev.who)
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}
