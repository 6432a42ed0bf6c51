package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/holdrule"
)

// Defaults for Config.
const (
	DefaultTTL       = 10 * time.Second
	DefaultLockDelay = time.Second
	// SerfCheck is the agent's node health check; every session is bound to it.
	SerfCheck = "serfHealth"
	// maxTxnOps is Consul's limit of operations in one transaction.
	maxTxnOps = 128
)

// Why a term ended. Every error that means the lock is (or must be assumed)
// gone wraps ErrLost.
var (
	ErrLost           = errors.New("lock lost")
	ErrLockLost       = fmt.Errorf("%w: the key is no longer held by this session", ErrLost)
	ErrSessionInvalid = fmt.Errorf("%w: Consul invalidated the session", ErrLost)
	ErrUnconfirmed    = fmt.Errorf("%w: lock not confirmed in time", ErrLost)
	ErrNotRenewed     = fmt.Errorf("%w: session not renewed within its TTL", ErrLost)
	ErrClockGap       = fmt.Errorf("%w: the process did not run for a while (frozen?)", ErrLost)

	// ErrReleased ends a term its owner released while it lasted.
	ErrReleased = errors.New("released")
	// ErrClosed is returned by Acquire once the lease is closed.
	ErrClosed = errors.New("lease closed")
	// ErrStale is returned by Acquire when the answer that showed the key
	// acquired came too late to trust (a slow agent, a freeze); the key
	// was released again. Contend again at once.
	ErrStale = errors.New("acquired the lock too late to trust it")
	// ErrRetired is returned by Acquire when the session it contended with
	// was retired (lost, or retired after one term) while it waited.
	ErrRetired = errors.New("the session was retired while it waited for the lock")
)

// Config configures a Lease.
type Config struct {
	// Client talks to the local agent.
	Client *api.Client
	// Node of the sessions; default the agent's node.
	Node string
	// Checks are the IDs of checks on Node the session is bound to: when one
	// goes critical, Consul invalidates the session at once. serfHealth is
	// always added; mariposa adds its liveness check
	// ("mariposa-<node>:mariposa"). A session is created only once every one
	// of them exists and is not critical.
	Checks []string
	// TTL of the session (Consul accepts 10s to 24h); renewed at half of
	// it. Default 10s.
	TTL time.Duration
	// LockDelay is Consul's lock delay after the session is invalidated.
	// Every safety bound is a fraction of it. Default 1s.
	LockDelay time.Duration
	// Detect is the failure-detection floor D of the cluster's gossip: how
	// long a term outlives its last confirmation, beyond lock_delay/2,
	// while every failed confirmation was a server's "no leader" answer (a
	// Consul leader election); see internal/holdrule. Zero: read from the
	// local agent's configuration before the first session, as
	// gossip_lan's suspicion_mult x probe_interval (4s with Consul's
	// defaults; every agent of a cluster is assumed to share its gossip
	// timing), and the strict rule when the agent does not say. Negative:
	// the strict rule.
	Detect time.Duration
	// Name names the sessions in Consul; default "mariposa lease".
	Name string
	// OneTermPerSession retires each session once its first term is
	// released: every term gets a session of its own. The elector uses it
	// when it has no shared lease.
	OneTermPerSession bool
	// Log receives the lease's events; default none.
	Log hclog.Logger
	// Now reads the clock; it must be monotonic. Default time.Now. Tests
	// replace it to simulate a frozen process.
	Now func() time.Time
}

// timing holds the bounds derived from the configuration; see the package
// documentation for why each is what it is.
type timing struct {
	ttl, lockDelay time.Duration
	rule           holdrule.Rule // the confirmation deadline
	round          time.Duration // period of the confirmation reads
	roundTimeout   time.Duration // an answer later than this confirms nothing anyway
	probeAfter     time.Duration // a read unanswered this long is probed (stale read)
	loseAfter      time.Duration // a confirmation older than this ends the term
	tick           time.Duration // watchdog period
	retry          time.Duration // acquire retry while lock delay holds
	request        time.Duration // timeout of one non-blocking request
	standbyWait    time.Duration // wait of a contender's blocking query
	checksWait     time.Duration // wait of the blocking query on the node's checks
	checksWarn     time.Duration // warn once when the checks took this long to pass
	cleanup        time.Duration // release + destroy
}

func newTiming(ttl, delay, detect time.Duration) timing {
	return timing{
		ttl:          ttl,
		lockDelay:    delay,
		rule:         holdrule.Rule{LockDelay: delay, Detect: max(detect, 0)}, // see resolveRule
		round:        delay / 5,
		roundTimeout: delay,
		probeAfter:   delay / 10,
		loseAfter:    delay / 2,
		tick:         max(delay/20, 5*time.Millisecond),
		retry:        min(max(delay/10, 20*time.Millisecond), 500*time.Millisecond),
		request:      5 * time.Second,
		standbyWait:  5 * time.Minute,
		checksWait:   10 * time.Second,
		checksWarn:   30 * time.Second,
		cleanup:      3 * time.Second,
	}
}

// Stats count what a lease did, for tests and metrics.
type Stats struct {
	Sessions       int64 // sessions created
	CreateFailures int64 // session creations Consul refused or that failed
	Rounds         int64 // confirmation rounds sent (each one read for every held key)
	Reads          int64 // confirmation requests sent (more than Rounds only past 128 keys)
}

// Lease is a node's lease: one Consul session at a time, under which terms
// hold locks. Make it with New; it creates its first session when the first
// term asks for one. Close it once every term is released.
type Lease struct {
	cfg    Config
	t      timing
	log    hclog.Logger
	now    func() time.Time
	checks []string
	// read is the confirmation read; tests replace it.
	read func(ctx context.Context, keys []string) (map[string]*api.KVPair, error)
	// probe says what a confirmation read that got no answer proves: the
	// agent's server answers that it knows no leader (NoLeader; see
	// serverProbe).
	// Tests replace it.
	probe func(ctx context.Context, key string) holdrule.Kind

	mu       sync.Mutex
	node     string
	resolved bool // the rule's Detect was read from the agent
	cur      *session
	creating chan struct{} // closed when the creation under way ends
	live     map[*session]struct{}
	keys     map[string]string // keys reserved under the lease: keyHeld or keyPending
	orphans  []orphan
	closed   bool
	finishes sync.WaitGroup

	sessions, createFailures, rounds, reads atomic.Int64
}

// orphan is a session whose cleanup failed, with the keys it may still hold.
type orphan struct {
	id   string
	keys []heldKey
}

type heldKey struct {
	key   string
	value []byte
	ops   api.TxnOps // applied with the release, in one transaction
}

// New returns a Lease for cfg, filling in defaults.
func New(cfg Config) *Lease {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	// 0 would mean Consul's default of 15s through the API, not no delay.
	if cfg.LockDelay <= 0 {
		cfg.LockDelay = DefaultLockDelay
	}
	if cfg.Name == "" {
		cfg.Name = "mariposa lease"
	}
	log := cfg.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	checks := []string{SerfCheck}
	for _, c := range cfg.Checks {
		if c != "" && !contains(checks, c) {
			checks = append(checks, c)
		}
	}
	l := &Lease{cfg: cfg, t: newTiming(cfg.TTL, cfg.LockDelay, cmp.Or(cfg.Detect, holdrule.DefaultDetect)), log: log, now: now, checks: checks,
		node: cfg.Node, live: map[*session]struct{}{}, keys: map[string]string{}}
	l.read = l.txnRead
	l.probe = l.serverProbe
	return l
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// LockDelay is the lock delay of the lease's sessions.
func (l *Lease) LockDelay() time.Duration { return l.t.lockDelay }

// Rule is the confirmation deadline of the lease's terms (of its next
// session's: Config.Detect zero is read from the agent before the first).
func (l *Lease) Rule() holdrule.Rule {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.rule
}

// TTL is the TTL of the lease's sessions.
func (l *Lease) TTL() time.Duration { return l.t.ttl }

// Stats returns the lease's counters.
func (l *Lease) Stats() Stats {
	return Stats{Sessions: l.sessions.Load(), CreateFailures: l.createFailures.Load(),
		Rounds: l.rounds.Load(), Reads: l.reads.Load()}
}

// Session returns the ID of the current session, "" when there is none.
func (l *Lease) Session() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return ""
	}
	return l.cur.id
}

// Close retires the current session, releases and destroys every session
// whose terms were all released, and retries earlier cleanups that failed.
// A term still held keeps its session until it is released. Acquire fails
// with ErrClosed afterwards.
func (l *Lease) Close() {
	l.mu.Lock()
	l.closed = true
	all := make([]*session, 0, len(l.live))
	for s := range l.live {
		all = append(all, s)
	}
	l.mu.Unlock()
	for _, s := range all {
		if l.retire(s, nil) {
			l.finish(s)
		}
	}
	l.finishes.Wait()
	l.retryOrphans()
}

// session returns the current session, creating one when there is none.
func (l *Lease) session(ctx context.Context) (*session, error) {
	for {
		l.mu.Lock()
		switch {
		case l.closed:
			l.mu.Unlock()
			return nil, ErrClosed
		case l.cur != nil && !l.cur.isRetired():
			s := l.cur
			l.mu.Unlock()
			return s, nil
		case l.creating != nil:
			wait := l.creating
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		l.creating = done
		l.mu.Unlock()

		s, err := l.create(ctx)
		l.mu.Lock()
		l.creating = nil
		close(done)
		if err != nil {
			l.mu.Unlock()
			return nil, err
		}
		l.live[s] = struct{}{}
		if l.closed {
			l.mu.Unlock()
			if l.retire(s, nil) {
				l.finish(s)
			}
			return nil, ErrClosed
		}
		l.cur = s
		l.mu.Unlock()
		return s, nil
	}
}

// create makes a new session once earlier sessions are cleaned up and the
// checks it is bound to pass, and starts renewing and confirming with it.
func (l *Lease) create(ctx context.Context) (*session, error) {
	// An orphan may still hold a key a term wants, and a new session would
	// wait for it until its TTL ran out twice.
	if l.retryOrphans() > 0 {
		return nil, fmt.Errorf("%d earlier session(s) not yet released", l.orphanCount())
	}
	node, err := l.nodeName(ctx)
	if err != nil {
		return nil, err
	}
	for {
		if err := l.waitChecks(ctx, node); err != nil {
			return nil, err
		}
		l.resolveRule()
		rctx, cancel := context.WithTimeout(ctx, l.t.request)
		sent := l.now()
		id, _, err := l.cfg.Client.Session().Create(&api.SessionEntry{
			Name:       l.cfg.Name,
			Node:       node,
			LockDelay:  l.t.lockDelay,
			Behavior:   api.SessionBehaviorRelease,
			TTL:        l.t.ttl.String(),
			NodeChecks: l.checks,
		}, (&api.WriteOptions{}).WithContext(rctx))
		cancel()
		if err != nil {
			l.createFailures.Add(1)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// A check deregistered or gone critical since waitChecks saw
			// it: wait for it again, quietly.
			if msg := err.Error(); strings.Contains(msg, "Missing check") || strings.Contains(msg, "critical state") {
				l.log.Debug("session refused: a bound check is missing or critical; waiting for it", "error", err)
				if !sleep(ctx, l.t.retry) {
					return nil, ctx.Err()
				}
				continue
			}
			return nil, fmt.Errorf("create session: %w", err)
		}
		l.sessions.Add(1)
		s := newSession(l, id, sent)
		s.start()
		l.log.Debug("session created", "session", id)
		return s, nil
	}
}

// resolveRule sets the rule's D, once: Config.Detect when set, else the
// agent's gossip suspicion floor; and warns when a Consul election of the
// agent's raft timing would outlast the rule's tolerance, ending every
// lock of the lease (issue 33).
func (l *Lease) resolveRule() {
	l.mu.Lock()
	done := l.resolved
	l.resolved = true
	l.mu.Unlock()
	if done {
		return
	}
	detect, heartbeat, err := AgentTiming(l.cfg.Client)
	if l.cfg.Detect != 0 {
		detect = max(l.cfg.Detect, 0)
	} else if err != nil {
		l.log.Warn("cannot read the agent's gossip timing: a Consul leader election will end every lock (strict rule)", "error", err)
	}
	l.mu.Lock()
	l.t.rule.Detect = detect
	rule := l.t.rule
	l.mu.Unlock()
	if heartbeat > 0 && rule.Tolerance() < holdrule.EstimateElection(heartbeat) {
		l.log.Warn("a Consul leader election would end every lock of this lease (raise lock_delay, or run the servers with raft_multiplier = 1)",
			"election", holdrule.EstimateElection(heartbeat), "raft_heartbeat_timeout", heartbeat,
			"tolerated", rule.Tolerance(), "lock_delay", rule.LockDelay, "gossip_detect", rule.Detect)
	}
}

// AgentTiming reads the local agent's gossip suspicion floor (LAN
// suspicion_mult x probe_interval; log10(N) only raises it), the D of
// internal/holdrule, and its raft heartbeat timeout (raft_multiplier x
// 1s) from its configuration. The floor is the agent's own setting, which
// the argument assumes every member shares (a cluster tuned to detect
// failures faster lets a leader invalidate a cut-off session sooner: a D
// of Consul's defaults would then outlast it).
func AgentTiming(client *api.Client) (detect, heartbeat time.Duration, err error) {
	self, err := client.Agent().Self()
	if err != nil {
		return 0, 0, err
	}
	dc := self["DebugConfig"]
	dur := func(k string) time.Duration {
		s, _ := dc[k].(string)
		d, _ := time.ParseDuration(s)
		return d
	}
	mult, _ := dc["GossipLANSuspicionMult"].(float64)
	probe := dur("GossipLANProbeInterval")
	if mult <= 0 || probe <= 0 {
		return 0, dur("ConsulRaftHeartbeatTimeout"), errors.New("the agent's configuration has no gossip_lan timing")
	}
	return time.Duration(mult) * probe, dur("ConsulRaftHeartbeatTimeout"), nil
}

// nodeName is Config.Node, or the agent's node.
func (l *Lease) nodeName(ctx context.Context) (string, error) {
	l.mu.Lock()
	node := l.node
	l.mu.Unlock()
	if node != "" {
		return node, nil
	}
	name, err := l.cfg.Client.Agent().NodeName()
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("read the agent's node name: %w", err)
	}
	if name == "" {
		return "", errors.New("the agent did not say its node name")
	}
	l.mu.Lock()
	l.node = name
	l.mu.Unlock()
	return name, nil
}

// waitChecks waits until every check the session is bound to exists in the
// catalog and is not critical, as Consul requires to create the session. On
// a fresh start mariposa's liveness check is registered moments before; the
// wait is normal, so it is logged at debug level only (once at warn if it
// lasts).
func (l *Lease) waitChecks(ctx context.Context, node string) error {
	start := time.Now()
	warned := false
	var index uint64
	for {
		wait := l.t.checksWait
		if index == 0 {
			wait = 0
		}
		rctx, cancel := context.WithTimeout(ctx, wait+wait/16+l.t.request)
		hcs, meta, err := l.cfg.Client.Health().Node(node, (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(rctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read the checks of node %s: %w", node, err)
		}
		missing := l.notReady(hcs)
		if len(missing) == 0 {
			return nil
		}
		if !warned && time.Since(start) > l.t.checksWarn {
			l.log.Warn("waiting for the checks the session is bound to", "not_passing", strings.Join(missing, ", "))
			warned = true
		} else {
			l.log.Debug("waiting for the checks the session is bound to", "not_passing", strings.Join(missing, ", "))
		}
		if meta.LastIndex < index || meta.LastIndex == 0 {
			index = 0
			if !sleep(ctx, l.t.retry) {
				return ctx.Err()
			}
		} else {
			index = meta.LastIndex
		}
	}
}

// notReady lists the bound checks missing from hcs or critical in it.
func (l *Lease) notReady(hcs api.HealthChecks) []string {
	var out []string
	for _, id := range l.checks {
		status := "missing"
		for _, hc := range hcs {
			if hc.CheckID == id {
				status = hc.Status
				break
			}
		}
		if status == "missing" || status == api.HealthCritical {
			out = append(out, id+" ("+status+")")
		}
	}
	return out
}

// finish stops a retired session's loops once its last term was released,
// then releases what it still holds and destroys it. When Consul cannot be
// reached, the session is kept to be cleaned up later: a valid session
// nobody renews would keep its locks until its TTL ran out twice.
func (l *Lease) finish(s *session) {
	s.stop()
	l.mu.Lock()
	delete(l.live, s)
	keys := s.pending
	s.pending = nil
	l.mu.Unlock()
	if s.isInvalid() {
		l.unpend(keys) // Consul released them
		return
	}
	o := orphan{id: s.id, keys: keys}
	if err := l.clean(o); err != nil {
		l.log.Warn("cannot release and destroy the session; will retry", "session", s.id, "error", err)
		l.mu.Lock()
		l.orphans = append(l.orphans, o)
		l.mu.Unlock()
		return
	}
	l.unpend(o.keys)
	l.log.Debug("session destroyed", "session", s.id)
}

// finishAsync is finish from one of the session's own loops.
func (l *Lease) finishAsync(s *session) {
	l.finishes.Add(1)
	go func() { defer l.finishes.Done(); l.finish(s) }()
}

// clean releases o's keys (a released key has no lock delay) and destroys
// o's session. Releasing a key another session holds is a no-op in Consul,
// and so is destroying a session that is gone.
func (l *Lease) clean(o orphan) error {
	ctx, cancel := context.WithTimeout(context.Background(), l.t.cleanup)
	defer cancel()
	w := (&api.WriteOptions{}).WithContext(ctx)
	for _, k := range o.keys {
		if _, _, err := l.cfg.Client.KV().Release(&api.KVPair{Key: k.key, Value: k.value, Session: o.id}, w); err != nil && !sessionGone(err) {
			return err
		}
	}
	_, err := l.cfg.Client.Session().Destroy(o.id, w)
	return err
}

// retryOrphans cleans up the sessions earlier cleanups could not, and
// returns how many are left. Their terms were released and their work
// stopped, so releasing their locks is safe.
func (l *Lease) retryOrphans() int {
	l.mu.Lock()
	todo := l.orphans
	l.orphans = nil
	l.mu.Unlock()
	var kept []orphan
	for _, o := range todo {
		if err := l.clean(o); err != nil {
			kept = append(kept, o)
			continue
		}
		l.unpend(o.keys)
		l.log.Info("released and destroyed an earlier session", "session", o.id)
	}
	l.mu.Lock()
	l.orphans = append(l.orphans, kept...)
	n := len(l.orphans)
	l.mu.Unlock()
	return n
}

// unpend frees the reservations of keys whose release is done.
func (l *Lease) unpend(keys []heldKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if l.keys[k.key] == keyPending {
			delete(l.keys, k.key)
		}
	}
}

func (l *Lease) orphanCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.orphans)
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sessionGone: Consul refused a release because the session no longer
// exists: when it invalidated the session it released every lock of it, so
// there is nothing left to release (and retrying would keep the key
// reserved for good).
func sessionGone(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "invalid session")
}
