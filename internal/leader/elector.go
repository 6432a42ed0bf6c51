package leader

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/lease"
)

// Defaults for Config.
const (
	DefaultSessionTTL = lease.DefaultTTL
	DefaultLockDelay  = lease.DefaultLockDelay
	// SerfCheck is the agent's node health check; every session is bound to it.
	SerfCheck = lease.SerfCheck
)

// Why a term ended. Errors that mean leadership is (or must be assumed) gone
// wrap ErrLost; they are the lease's.
var (
	ErrStopped        = errors.New("stopped: Run's context ended")
	ErrResigned       = errors.New("resigned: onTerm returned while leader")
	ErrLost           = lease.ErrLost
	ErrLockLost       = lease.ErrLockLost
	ErrSessionInvalid = lease.ErrSessionInvalid
	ErrUnconfirmed    = lease.ErrUnconfirmed
	ErrNotRenewed     = lease.ErrNotRenewed
	ErrClockGap       = lease.ErrClockGap
)

// Config configures an Elector.
type Config struct {
	// Lease is the node's lease to hold the key under (shared with the
	// node's other holds: one session, one confirmation read per round for
	// all of them). When nil, the elector makes a lease of its own from the
	// fields below, with a new session for every term.
	Lease *lease.Lease
	// Key is the KV key locked by the leader, e.g. "mariposa/leader/web".
	Key string
	// Value is written to the key when acquired, so others can see who leads.
	Value []byte
	// Log receives the elector's events; default none.
	Log hclog.Logger

	// The fields below make the elector's own lease when Lease is nil, and
	// are ignored otherwise (the lease has its own).

	// Client talks to the local agent.
	Client *api.Client
	// SessionTTL of the session (Consul accepts 10s to 24h); renewed at half
	// of it. Default 10s.
	SessionTTL time.Duration
	// LockDelay is Consul's lock delay after the session is invalidated.
	// Every safety bound is a fraction of it. Default 1s.
	LockDelay time.Duration
	// Detect is the cluster's gossip failure-detection floor: how long a
	// term outlives lock_delay/2 while the servers answer that they have
	// no leader (a Consul election); see internal/holdrule. Default 4s
	// (Consul's LAN defaults); negative: the strict rule.
	Detect time.Duration
	// Checks are the IDs of checks on Node the session is bound to: when one
	// goes critical, Consul invalidates the session at once. serfHealth is
	// always added. mariposa adds its liveness check
	// ("mariposa-<node>:mariposa").
	Checks []string
	// Node of the session; default the agent's node.
	Node string
	// SessionName names the session in Consul; default "mariposa leader <key>".
	SessionName string
	// Now reads the clock; it must be monotonic. Default time.Now. Tests
	// replace it to simulate a frozen process.
	Now func() time.Time
}

// Elector contends for one key. Make it with New; call Run once at a time.
type Elector struct {
	cfg      Config
	shared   *lease.Lease
	leaseCfg lease.Config // of the lease each Run makes when none is shared
	log      hclog.Logger
	now      func() time.Time
	running  atomic.Bool
}

// New returns an Elector for cfg, filling in defaults.
func New(cfg Config) *Elector {
	log := cfg.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("leader").With("key", cfg.Key)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	name := cfg.SessionName
	if name == "" {
		name = "mariposa leader " + cfg.Key
	}
	return &Elector{cfg: cfg, shared: cfg.Lease, log: log, now: now, leaseCfg: lease.Config{
		Client: cfg.Client, Node: cfg.Node, Checks: cfg.Checks, TTL: cfg.SessionTTL,
		LockDelay: cfg.LockDelay, Detect: cfg.Detect, Name: name, OneTermPerSession: true, Log: log, Now: now,
	}}
}

// Run contends for the key until ctx ends, calling onTerm once per term (see
// the package documentation). It returns after releasing the lock (and, with
// a lease of its own, destroying its session).
func (e *Elector) Run(ctx context.Context, onTerm func(*Term)) {
	if e.cfg.Key == "" || (e.shared == nil && e.cfg.Client == nil) {
		panic("leader: Config needs a Key, and a Client or a Lease")
	}
	if !e.running.CompareAndSwap(false, true) {
		panic("leader: Run called while already running")
	}
	defer e.running.Store(false)
	l := e.shared
	if l == nil {
		l = lease.New(e.leaseCfg)
		defer l.Close()
	}
	retry := min(max(l.LockDelay()/10, 20*time.Millisecond), 500*time.Millisecond)
	backoff := retry
	var lastErr string
	for ctx.Err() == nil {
		err := e.round(ctx, l, onTerm)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff, lastErr = retry, ""
			continue
		}
		// Say it once, not every retry while the agent is away.
		if msg := err.Error(); msg != lastErr {
			e.log.Warn("cannot contend, retrying", "error", err)
			lastErr = msg
		} else {
			e.log.Debug("cannot contend, retrying", "error", err)
		}
		sleep(ctx, backoff/2+rand.N(backoff/2+1))
		backoff = min(backoff*2, 5*time.Second)
	}
}

// round contends once, and leads one term if it gets the lock. A nil error
// means the round ended normally (after a term).
func (e *Elector) round(ctx context.Context, l *lease.Lease, onTerm func(*Term)) error {
	lt, err := l.Acquire(ctx, lease.Hold{Key: e.cfg.Key, Value: e.cfg.Value, Log: e.log})
	switch {
	case errors.Is(err, lease.ErrStale):
		e.log.Warn("acquired the lock too late to trust it; released it")
		return nil
	case errors.Is(err, lease.ErrRetired):
		// The session was lost while contending; the lease has said so.
		e.log.Debug("contending again with a new session", "reason", err)
		return nil
	}
	if err != nil {
		return err
	}
	t := &Term{Term: lt}
	log := e.log.With("session", t.Session)
	stopped := context.AfterFunc(ctx, func() { lt.End(ErrStopped) })
	log.Info("acquired leadership", "index", t.Index, "lock_index", t.LockIndex)
	onTerm(t)
	stopped()
	lt.End(ErrResigned)
	// Released only now that onTerm stopped the leader-only work, with the
	// value it was acquired with and ReleaseAlso's ops, if any.
	if err := lt.ReleaseWith(e.cfg.Value, t.releaseOps); err != nil {
		log.Debug("release failed; retried in the background", "error", err)
	}
	if errors.Is(t.Err(), ErrLost) {
		log.Warn("leadership ended", "reason", t.Err())
	} else {
		log.Info("leadership ended", "reason", t.Err())
	}
	return nil
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
