package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/holdrule"
)

// Answers seen from a client agent while the leading server of three was
// killed (internal/consultest, Consul 1.20), and other failures.
const (
	ansDeadLeader   = "Failed request: rpc error making call: rpc error getting client: failed to get conn: dial tcp 127.0.0.1:0->127.0.0.1:27431: connect: connection refused"
	ansAgentToDead  = "Failed request: rpc error getting client: failed to get conn: dial tcp 127.0.0.1:0->127.0.0.1:27431: connect: connection refused"
	ansNoLeader     = "Failed request: No cluster leader"
	ansStaleDead    = "Unexpected response code: 500 (rpc error getting client: failed to get conn: dial tcp 127.0.0.1:0->127.0.0.1:27431: connect: connection refused)"
	ansLocalRefused = `Put "http://127.0.0.1:8500/v1/txn": dial tcp 127.0.0.1:8500: connect: connection refused`
	ansACL          = "Failed request: rpc error making call: Permission denied: token with AccessorID 'x' lacks permission 'key:read' on \"k\""
	ansTimeout      = `Put "http://127.0.0.1:8500/v1/txn": context deadline exceeded`
)

func TestNoLeaderAnswer(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		want holdrule.Kind
	}{
		{ansDeadLeader, holdrule.NoLeader},
		{ansAgentToDead, holdrule.NoLeader},
		{ansNoLeader, holdrule.NoLeader},
		{ansStaleDead, holdrule.NoLeader},
		{"Unexpected response code: 500 (No cluster leader)", holdrule.NoLeader},
		// A leader elected but not yet ready for consistent reads, stopped
		// meanwhile (seen in CI when the leading server was restarted).
		{"Failed request: rpc error making call: shutdown waiting for leader", holdrule.NoLeader},
		{ansLocalRefused, holdrule.Unproven},
		{ansACL, holdrule.Unproven},
		{ansTimeout, holdrule.Unproven},
		{"Unexpected response code: 403 (rpc error: No cluster leader)", holdrule.Unproven},
		{"Failed request: rpc error making call: invalid session", holdrule.Unproven},
	} {
		if got := noLeaderAnswer(errors.New(tt.msg)); got != tt.want {
			t.Errorf("%q: %v, want %v", tt.msg, got, tt.want)
		}
	}
}

// TestWatchdogRidesElection: confirmations answered "no leader" extend the
// deadline from c + L/2 to c + D + L/2 (issue 33); any other failure since
// c brings back c + L/2, and a read that shows the hold ends the extension.
func TestWatchdogRidesElection(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		jump  time.Duration // clock moves, then one round is sent
		err   string        // the round's error; "" answers with the hold
		probe holdrule.Kind // a timed-out round's stale probe
	}
	for _, tc := range []struct {
		name     string
		steps    []step
		alive    time.Duration // after the steps, still held this much later
		lostBy   time.Duration // and lost by then
		deadline time.Duration // Term.Deadline, after the last good read
	}{
		{"no leader: rides 4.5s", []step{{100 * ms, ansDeadLeader, 0}, {900 * ms, ansNoLeader, 0}}, 4300 * ms, 4600 * ms, 5 * time.Second},
		{"timeout proven by the stale probe", []step{{100 * ms, "timeout", holdrule.NoLeader}}, 4300 * ms, 4600 * ms, 5 * time.Second},
		{"timeout not proven: strict", []step{{100 * ms, "timeout", holdrule.Unproven}}, 400 * ms, 600 * ms, time.Second},
		{"agent down: strict", []step{{100 * ms, ansLocalRefused, 0}}, 400 * ms, 600 * ms, time.Second},
		{"no leader, then agent down: strict at once", []step{{100 * ms, ansNoLeader, 0}, {600 * ms, ansLocalRefused, 0}}, 0, 700 * ms, time.Second},
		{"ACL: strict", []step{{100 * ms, ansACL, 0}}, 400 * ms, 600 * ms, time.Second},
		{"a good read ends the extension", []step{{100 * ms, ansNoLeader, 0}, {2 * time.Second, "", 0}}, 400 * ms, 600 * ms, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{}
			l, s := newTestLease(clock)
			f := &fakeStore{pairs: map[string]*api.KVPair{}}
			l.read = func(ctx context.Context, keys []string) (map[string]*api.KVPair, error) {
				if f.err != nil && f.err.Error() == "timeout" {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return f.read(ctx, keys)
			}
			probe := holdrule.Unproven
			l.probe = func(context.Context, string) holdrule.Kind { return probe }
			l.t.roundTimeout = 20 * ms
			tm := heldTerms(l, s, f, 1)[0]
			base := tm.confirmed
			for _, st := range tc.steps {
				clock.Jump(st.jump)
				f.err, probe = nil, st.probe
				if st.err != "" {
					f.err = errors.New(st.err)
				} else {
					base = clock.Now()
				}
				s.round(context.Background(), s.attached(true))
				s.inspect(clock.Now(), 10*ms)
			}
			since := clock.Now().Sub(base)
			if tc.alive > since {
				clock.Jump(tc.alive - since)
				if s.inspect(clock.Now(), 10*ms); tm.isExpired() {
					t.Fatalf("lost %v after the last confirmation: %v", tc.alive, tm.Err())
				}
			}
			clock.Jump(max(tc.lostBy-clock.Now().Sub(base), 0))
			s.inspect(clock.Now(), 10*ms)
			if !tm.isExpired() || !errors.Is(tm.Err(), ErrUnconfirmed) {
				t.Fatalf("held %v after the last confirmation: %v", tc.lostBy, tm.Err())
			}
			if got := tm.Deadline().Sub(base); got < tc.deadline-ms || got > tc.deadline+ms {
				t.Fatalf("Deadline = last confirmation + %v, want + %v", got, tc.deadline)
			}
		})
	}
}

// TestDetectFromAgent: D is read from the agent's gossip timing before the
// first session (Consul's defaults: 4 x 1s; a dev agent's: 3 x 100ms; a
// fleet's FastGossip: 3 x 300ms); Config.Detect overrides it, negative is the strict rule.
func TestDetectFromAgent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gossip map[string]any
		detect time.Duration
		want   time.Duration
	}{
		{"dev agent (3 x 100ms)", nil, 0, 300 * time.Millisecond},
		{"Consul's defaults", map[string]any{"gossip_lan": map[string]any{"probe_interval": "1s", "suspicion_mult": 4}}, 0, 4 * time.Second},
		{"fast gossip", map[string]any{"gossip_lan": map[string]any{"probe_interval": "300ms", "suspicion_mult": 3}}, 0, 900 * time.Millisecond},
		{"configured", nil, 2 * time.Second, 2 * time.Second},
		{"strict", nil, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := consultest.NewDev(t, consultest.Options{ExtraConfig: tc.gossip}).Client(t)
			l := New(Config{Client: c, Detect: tc.detect})
			defer l.Close()
			tm, err := l.Acquire(t.Context(), Hold{Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			defer tm.Release()
			if got := tm.s.rule; got.Detect != tc.want || got.LockDelay != time.Second {
				t.Fatalf("rule %+v, want D = %v", got, tc.want)
			}
		})
	}
}

func TestStaleKind(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		meta *api.QueryMeta
		want holdrule.Kind
	}{
		{&api.QueryMeta{KnownLeader: true}, holdrule.Unproven},                        // the leader answered
		{&api.QueryMeta{KnownLeader: true, LastContact: 80 * ms}, holdrule.Unproven},  // a follower, heartbeats on time
		{&api.QueryMeta{KnownLeader: true, LastContact: 101 * ms}, holdrule.NoLeader}, // a follower whose leader went silent
		{&api.QueryMeta{KnownLeader: false}, holdrule.NoLeader},
		{nil, holdrule.Unproven},
	} {
		if got := staleKind(tt.meta, 100*ms); got != tt.want {
			t.Errorf("%+v: %v, want %v", tt.meta, got, tt.want)
		}
	}
}

// TestHeldReadSucceedsLate: during an election a server holds the
// consistent read until a new leader is elected, and it may then succeed
// after the strict deadline of its own send time. The stale probe made
// while it was held says no leader, at the probe's own time, so the late
// confirmation keeps the term (measured: a held read answered after 786ms).
func TestHeldReadSucceedsLate(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	f := &fakeStore{pairs: map[string]*api.KVPair{}}
	l.t.probeAfter, l.t.roundTimeout = 10*time.Millisecond, 5*time.Second
	release := make(chan struct{})
	l.read = func(ctx context.Context, keys []string) (map[string]*api.KVPair, error) {
		<-release
		return f.read(ctx, keys)
	}
	probes := 0
	l.probe = func(context.Context, string) holdrule.Kind {
		probes++
		if probes == 1 {
			clock.Jump(700 * time.Millisecond) // the election lasts
			close(release)
		}
		return holdrule.NoLeader
	}
	tm := heldTerms(l, s, f, 1)[0]
	s.round(context.Background(), s.attached(true))
	s.inspect(clock.Now(), 10*time.Millisecond)
	if tm.isExpired() {
		t.Fatalf("the late confirmation ended the term: %v", tm.Err())
	}
	if probes == 0 {
		t.Fatal("the held read was not probed")
	}
}

// TestSlowReadHedged: a read left waiting (the client agent retrying on a
// server that went away) while the probe finds a leader in contact is
// hedged: a second read confirms the term through a live server.
func TestSlowReadHedged(t *testing.T) {
	clock := &fakeClock{}
	l, s := newTestLease(clock)
	f := &fakeStore{pairs: map[string]*api.KVPair{}}
	l.t.probeAfter, l.t.roundTimeout = 10*time.Millisecond, 5*time.Second
	var mu sync.Mutex
	reads := 0
	stuck := make(chan struct{})
	defer close(stuck)
	l.read = func(ctx context.Context, keys []string) (map[string]*api.KVPair, error) {
		mu.Lock()
		reads++
		first := reads == 1
		mu.Unlock()
		if first {
			select {
			case <-stuck:
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		}
		return f.read(ctx, keys)
	}
	l.probe = func(context.Context, string) holdrule.Kind { return holdrule.Unproven }
	tm := heldTerms(l, s, f, 1)[0]
	before := tm.LastConfirmed()
	clock.Jump(300 * time.Millisecond)
	if !s.round(context.Background(), s.attached(true)) {
		t.Fatal("the round failed")
	}
	if !tm.LastConfirmed().After(before) || tm.isExpired() {
		t.Fatalf("not confirmed by the second read: %v", tm.Err())
	}
}

// TestWarnsOfLongElections: a lease warns before its first session when an
// election of its agent's raft timing (holdrule.EstimateElection of
// ConsulRaftHeartbeatTimeout) would outlast what its rule tolerates. A dev
// agent's raft timing is 35ms x raft_multiplier, so the strict rule (0.3s
// tolerated with lock_delay 1s) stands for a short lock_delay: 350ms
// estimated at multiplier 5 warns, 70ms at 1 does not, and the extended
// rule (D = 300ms from the dev agent's gossip) tolerates 600ms.
func TestWarnsOfLongElections(t *testing.T) {
	for _, tc := range []struct {
		mult   int
		detect time.Duration
		warn   bool
	}{{1, -1, false}, {5, -1, true}, {5, 0, false}} {
		t.Run(fmt.Sprintf("raft_multiplier %d detect %v", tc.mult, tc.detect), func(t *testing.T) {
			c := consultest.NewDev(t, consultest.Options{ExtraConfig: map[string]any{
				"performance": map[string]any{"raft_multiplier": tc.mult},
			}}).Client(t)
			var buf syncBuffer
			l := New(Config{Client: c, Detect: tc.detect, Log: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})})
			defer l.Close()
			tm, err := l.Acquire(t.Context(), Hold{Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			defer tm.Release()
			if got := strings.Contains(buf.String(), "a Consul leader election would end every lock"); got != tc.warn {
				t.Fatalf("warned %v, want %v: %s", got, tc.warn, buf.String())
			}
		})
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLeaderKind(t *testing.T) {
	for _, tt := range []struct {
		addr string
		err  error
		want holdrule.Kind
	}{
		{"", nil, holdrule.NoLeader}, // a server that knows no leader (restarted, or electing)
		{"127.0.0.1:8300", nil, holdrule.Unproven},
		{"", errors.New(ansStaleDead), holdrule.NoLeader},
		{"", errors.New(`Get "http://127.0.0.1:8500/v1/status/leader": context deadline exceeded`), holdrule.Unproven},
		{"", errors.New(`Get "http://127.0.0.1:8500/v1/status/leader": dial tcp 127.0.0.1:8500: connect: connection refused`), holdrule.Unproven},
		{"", errors.New("Unexpected response code: 500 (No known Consul servers)"), holdrule.Unproven},
	} {
		if got := leaderKind(tt.addr, tt.err); got != tt.want {
			t.Errorf("%q, %v: %v, want %v", tt.addr, tt.err, got, tt.want)
		}
	}
}

// TestServerProbeWithoutLeader: a server that has not heard from a leader
// since it started (as a server started again in a rolling upgrade; here
// one of three started alone, which never has one) forwards even a stale
// read to the leader and holds it, so the stale probe alone proves nothing
// in time; its Status.Leader answers "" at once, and the server probe is
// NoLeader. A server with a leader is not taken for one without.
func TestServerProbeWithoutLeader(t *testing.T) {
	consultest.SkipShort(t, "3-server cluster in -short mode")
	cl := consultest.NewCluster(t, 3, 0)
	within := func(probe func(context.Context, string) holdrule.Kind) (holdrule.Kind, time.Duration) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		return probe(ctx, "k"), time.Since(start)
	}
	led := New(Config{Client: cl.Servers[0].Client(t)})
	if kind, _ := within(led.serverProbe); kind != holdrule.Unproven {
		t.Errorf("server probe with a leader: %v", kind)
	}

	for _, s := range cl.Servers {
		s.Kill()
	}
	a := cl.Servers[0]
	a.StartNoWait(t)
	c := a.Client(t)
	if !consultest.WaitFor(30*time.Second, func() bool { _, err := c.Agent().Self(); return err == nil }) {
		t.Fatal("the agent does not answer")
	}
	l := New(Config{Client: c})
	if kind, took := within(l.staleProbe); kind != holdrule.Unproven || took < 900*time.Millisecond {
		t.Errorf("stale probe: %v after %v, want held (Unproven after 1s)", kind, took)
	}
	if kind, took := within(l.serverProbe); kind != holdrule.NoLeader || took > 500*time.Millisecond {
		t.Errorf("server probe: %v after %v, want NoLeader at once", kind, took)
	}
}
