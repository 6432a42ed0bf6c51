package leader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// Defaults for Config.
const (
	DefaultSessionTTL = 10 * time.Second
	DefaultLockDelay  = time.Second
	// SerfCheck is the agent's node health check; every session is bound to it.
	SerfCheck = "serfHealth"
)

// Why a term ended. Errors that mean leadership is (or must be assumed) gone
// wrap ErrLost.
var (
	ErrStopped        = errors.New("stopped: Run's context ended")
	ErrResigned       = errors.New("resigned: onTerm returned while leader")
	ErrLost           = errors.New("leadership lost")
	ErrLockLost       = fmt.Errorf("%w: the lock key is no longer held by this session", ErrLost)
	ErrSessionInvalid = fmt.Errorf("%w: Consul invalidated the session", ErrLost)
	ErrUnconfirmed    = fmt.Errorf("%w: lock not confirmed in time", ErrLost)
	ErrNotRenewed     = fmt.Errorf("%w: session not renewed within its TTL", ErrLost)
	ErrClockGap       = fmt.Errorf("%w: the process did not run for a while (frozen?)", ErrLost)
)

// Config configures an Elector.
type Config struct {
	// Client talks to the local agent.
	Client *api.Client
	// Key is the KV key locked by the leader, e.g. "mariposa/leader/web".
	Key string
	// SessionTTL of the session (Consul accepts 10s to 24h); renewed at half
	// of it. Default 10s.
	SessionTTL time.Duration
	// LockDelay is Consul's lock delay after the session is invalidated.
	// Every safety bound is a fraction of it. Default 1s.
	LockDelay time.Duration
	// Checks are the IDs of checks on Node the session is bound to: when one
	// goes critical, Consul invalidates the session at once. serfHealth is
	// always added. mariposa adds its liveness check
	// ("mariposa-<node>:mariposa").
	Checks []string
	// Node of the session; default the agent's node.
	Node string
	// Value is written to the key when acquired, so others can see who leads.
	Value []byte
	// SessionName names the session in Consul; default "mariposa leader <key>".
	SessionName string
	// Log receives the elector's events; default none.
	Log hclog.Logger
	// Now reads the clock; it must be monotonic. Default time.Now. Tests
	// replace it to simulate a frozen process.
	Now func() time.Time
}

// timing holds the bounds derived from the configuration; see the package
// documentation for why each is what it is.
type timing struct {
	ttl, lockDelay time.Duration
	confirmWait    time.Duration // wait of the confirming blocking query
	loseAfter      time.Duration // a confirmation older than this ends the term
	tick           time.Duration // watchdog period
	retry          time.Duration // acquire retry while lock delay holds; first error backoff
	maxBackoff     time.Duration
	request        time.Duration // timeout of one non-blocking request
	standbyWait    time.Duration // wait of a standby's blocking query
	cleanup        time.Duration // release + destroy, after the term
}

func newTiming(ttl, delay time.Duration) timing {
	t := timing{
		ttl:         ttl,
		lockDelay:   delay,
		confirmWait: delay / 5,
		loseAfter:   delay / 2,
		tick:        max(delay/20, 5*time.Millisecond),
		retry:       min(max(delay/10, 20*time.Millisecond), 500*time.Millisecond),
		maxBackoff:  5 * time.Second,
		request:     5 * time.Second,
		standbyWait: 5 * time.Minute,
		cleanup:     3 * time.Second,
	}
	return t
}

// Elector contends for one key. Make it with New; call Run once at a time.
type Elector struct {
	cfg     Config
	t       timing
	log     hclog.Logger
	now     func() time.Time
	checks  []string
	running atomic.Bool
	// orphans are sessions whose cleanup failed; only Run's goroutine
	// touches them.
	orphans []string
}

// New returns an Elector for cfg, filling in defaults.
func New(cfg Config) *Elector {
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	// 0 would mean Consul's default of 15s through the API, not no delay.
	if cfg.LockDelay <= 0 {
		cfg.LockDelay = DefaultLockDelay
	}
	if cfg.SessionName == "" {
		cfg.SessionName = "mariposa leader " + cfg.Key
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
	return &Elector{
		cfg:    cfg,
		t:      newTiming(cfg.SessionTTL, cfg.LockDelay),
		log:    log.Named("leader").With("key", cfg.Key),
		now:    now,
		checks: checks,
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Run contends for the key until ctx ends, calling onTerm once per term (see
// the package documentation). It returns after releasing the lock and
// destroying its session.
func (e *Elector) Run(ctx context.Context, onTerm func(*Term)) {
	if e.cfg.Client == nil || e.cfg.Key == "" {
		panic("leader: Config needs a Client and a Key")
	}
	if !e.running.CompareAndSwap(false, true) {
		panic("leader: Run called while already running")
	}
	defer e.running.Store(false)
	defer func() {
		if len(e.orphans) > 0 {
			e.retryOrphans()
		}
	}()
	backoff := e.t.retry
	var lastErr string
	for ctx.Err() == nil {
		var err error
		if len(e.orphans) > 0 {
			// An orphan may still hold the lock, and a new session would
			// wait for it until its TTL ran out twice.
			e.retryOrphans()
			if len(e.orphans) > 0 {
				err = fmt.Errorf("%d earlier session(s) not yet released", len(e.orphans))
			}
		}
		if err == nil {
			err = e.round(ctx, onTerm)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff, lastErr = e.t.retry, ""
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
		backoff = min(backoff*2, e.t.maxBackoff)
	}
}

// session is one Consul session, used for at most one term.
type session struct {
	id          string
	mu          sync.Mutex
	renewed     time.Time // send time of the last successful renewal (or creation)
	invalid     chan struct{}
	invalidOnce sync.Once
}

func (s *session) renewedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewed
}

func (s *session) setInvalid() { s.invalidOnce.Do(func() { close(s.invalid) }) }

func (s *session) isInvalid() bool {
	select {
	case <-s.invalid:
		return true
	default:
		return false
	}
}

// round is one session: create it, contend, maybe lead one term, release and
// destroy it. A nil error means the round ended normally (after a term).
func (e *Elector) round(ctx context.Context, onTerm func(*Term)) error {
	s, err := e.createSession(ctx)
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	log := e.log.With("session", s.id)
	log.Debug("session created")

	// Renewals run until cleanup, also through a graceful stop, so the lock
	// stays ours until onTerm has stopped the leader-only work.
	life, endLife := context.WithCancel(context.Background())
	var renewing sync.WaitGroup
	renewing.Go(func() { e.renew(life, s, log) })
	defer func() {
		endLife()
		renewing.Wait()
		e.cleanup(s, log)
	}()

	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.invalid:
			ccancel()
		case <-cctx.Done():
		}
	}()
	sent, pair, err := e.contend(cctx, s, log)
	ccancel()
	if err != nil {
		if s.isInvalid() && ctx.Err() == nil {
			return errors.New("the session was invalidated while it waited for the lock")
		}
		return err
	}

	t := &Term{
		Key:       e.cfg.Key,
		Session:   s.id,
		Index:     pair.ModifyIndex,
		LockIndex: pair.LockIndex,
		Started:   sent,
		e:         e,
		s:         s,
		confirmed: sent,
		lost:      make(chan struct{}),
		expired:   make(chan struct{}),
	}
	// The acquisition itself may be stale already (a slow answer, a freeze).
	if t.check(e.now()); t.isExpired() {
		log.Warn("acquired the lock too late to trust it", "reason", t.Err())
		return nil
	}

	mctx, mcancel := context.WithCancel(context.Background())
	var monitors sync.WaitGroup
	monitors.Go(func() { e.confirmLoop(mctx, t, log) })
	monitors.Go(func() { e.watchdog(mctx, t) })
	monitors.Go(func() {
		select {
		case <-ctx.Done():
			t.end(ErrStopped)
		case <-s.invalid:
			t.expire(ErrSessionInvalid)
			return
		case <-mctx.Done():
			return
		}
		// Stopping: the lock can still be lost while onTerm stops its work.
		select {
		case <-s.invalid:
			t.expire(ErrSessionInvalid)
		case <-mctx.Done():
		}
	})
	log.Info("acquired leadership", "index", t.Index, "lock_index", t.LockIndex)
	onTerm(t)
	t.end(ErrResigned)
	mcancel()
	monitors.Wait()
	if errors.Is(t.Err(), ErrLost) {
		log.Warn("leadership ended", "reason", t.Err())
	} else {
		log.Info("leadership ended", "reason", t.Err())
	}
	return nil
}

func (e *Elector) createSession(ctx context.Context) (*session, error) {
	rctx, cancel := context.WithTimeout(ctx, e.t.request)
	defer cancel()
	sent := e.now()
	id, _, err := e.cfg.Client.Session().Create(&api.SessionEntry{
		Name:       e.cfg.SessionName,
		Node:       e.cfg.Node,
		LockDelay:  e.t.lockDelay,
		Behavior:   api.SessionBehaviorRelease,
		TTL:        e.t.ttl.String(),
		NodeChecks: e.checks,
	}, (&api.WriteOptions{}).WithContext(rctx))
	if err != nil {
		return nil, err
	}
	return &session{id: id, renewed: sent, invalid: make(chan struct{})}, nil
}

// renew renews s every TTL/2 (sooner after an error) until ctx ends or
// Consul says the session is gone.
func (e *Elector) renew(ctx context.Context, s *session, log hclog.Logger) {
	wait := e.t.ttl / 2
	for sleep(ctx, wait) {
		rctx, cancel := context.WithTimeout(ctx, e.t.request)
		sent := e.now()
		entry, _, err := e.cfg.Client.Session().Renew(s.id, (&api.WriteOptions{}).WithContext(rctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Debug("session renewal failed", "error", err)
			wait = min(e.t.ttl/8, time.Second)
		case entry == nil:
			log.Debug("session is gone")
			s.setInvalid()
			return
		default:
			s.mu.Lock()
			if sent.After(s.renewed) {
				s.renewed = sent
			}
			s.mu.Unlock()
			wait = e.t.ttl / 2
		}
	}
}

// contend waits for the key to be free and acquires it with s. It returns
// the lock key as read by a consistent read that showed s holding it, and
// when that read was sent: the term's first confirmation.
func (e *Elector) contend(ctx context.Context, s *session, log hclog.Logger) (time.Time, *api.KVPair, error) {
	kv := e.cfg.Client.KV()
	var index uint64
	for {
		if err := ctx.Err(); err != nil {
			return time.Time{}, nil, err
		}
		// Look before acquiring: an acquire whose answer was lost may have
		// succeeded, and a held key is waited on with a blocking query.
		wait := e.t.standbyWait
		if index == 0 {
			wait = 0
		}
		rctx, cancel := context.WithTimeout(ctx, wait+wait/16+e.t.request)
		sent := e.now()
		pair, meta, err := kv.Get(e.cfg.Key, (&api.QueryOptions{
			WaitIndex: index, WaitTime: wait, RequireConsistent: true,
		}).WithContext(rctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return time.Time{}, nil, ctx.Err()
			}
			return time.Time{}, nil, fmt.Errorf("read %s: %w", e.cfg.Key, err)
		}
		if meta.LastIndex < index {
			index = 0 // the index went backwards (state reset): start over
		} else {
			index = meta.LastIndex
		}
		switch {
		case pair != nil && pair.Session == s.id:
			return sent, pair, nil
		case pair != nil && pair.Session != "":
			continue // held by another session: block until it changes
		}
		rctx, cancel = context.WithTimeout(ctx, e.t.request)
		ok, _, err := kv.Acquire(&api.KVPair{Key: e.cfg.Key, Value: e.cfg.Value, Session: s.id},
			(&api.WriteOptions{}).WithContext(rctx))
		cancel()
		index = 0 // read again at once to see what happened
		switch {
		case err != nil && strings.Contains(err.Error(), "invalid session"):
			s.setInvalid()
			return time.Time{}, nil, err
		case err != nil:
			if ctx.Err() != nil {
				return time.Time{}, nil, ctx.Err()
			}
			return time.Time{}, nil, fmt.Errorf("acquire %s: %w", e.cfg.Key, err)
		case !ok:
			// Free but refused: lock delay after an invalidation, or another
			// session was faster. Consul does not say how long the delay lasts.
			log.Trace("acquire refused, lock delay or race")
			if !sleep(ctx, e.t.retry) {
				return time.Time{}, nil, ctx.Err()
			}
		}
	}
}

// confirmLoop keeps the term's confirmation recent until ctx ends or the
// lock is lost.
func (e *Elector) confirmLoop(ctx context.Context, t *Term, log hclog.Logger) {
	kv := e.cfg.Client.KV()
	index := t.Index
	wait := e.t.confirmWait
	for ctx.Err() == nil && !t.isExpired() {
		rctx, cancel := context.WithTimeout(ctx, wait+wait/16+e.t.request)
		sent := e.now()
		pair, meta, err := kv.Get(t.Key, (&api.QueryOptions{
			WaitIndex: index, WaitTime: wait, RequireConsistent: true,
		}).WithContext(rctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// No confirmation; the watchdog ends the term if this lasts.
			log.Debug("cannot confirm the lock", "error", err)
			sleep(ctx, wait/4)
			continue
		case pair == nil:
			t.expire(fmt.Errorf("%w (the key was deleted)", ErrLockLost))
			return
		case pair.Session != t.Session:
			why := "released: the session was invalidated, or the key released by hand"
			if pair.Session != "" {
				why = "now held by session " + pair.Session
			}
			t.expire(fmt.Errorf("%w (%s)", ErrLockLost, why))
			return
		}
		t.confirm(sent)
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
	}
}

// watchdog ends the term when its confirmation or renewal gets too old, or
// when the process did not run for longer than loseAfter.
func (e *Elector) watchdog(ctx context.Context, t *Term) {
	tk := time.NewTicker(e.t.tick)
	defer tk.Stop()
	prev := e.now()
	for !t.isExpired() {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		now := e.now()
		if gap := now.Sub(prev); gap > e.t.loseAfter {
			t.expire(fmt.Errorf("%w (%v between two checks %v apart)", ErrClockGap,
				gap.Round(time.Millisecond), e.t.tick))
		}
		prev = now
		t.check(now)
	}
}

// cleanup releases the key (if s still holds it: a released key has no lock
// delay, so a standby starts at once) and destroys s. When Consul cannot be
// reached, s is kept to be cleaned up later: a valid session nobody renews
// would keep the lock until its TTL ran out twice.
func (e *Elector) cleanup(s *session, log hclog.Logger) {
	if s.isInvalid() {
		return
	}
	if err := e.release(s.id); err != nil {
		log.Warn("cannot release the lock and destroy the session; will retry", "error", err)
		e.orphans = append(e.orphans, s.id)
		return
	}
	log.Debug("session released and destroyed")
}

// release releases the key if session holds it, and destroys session.
// Releasing a key another session holds is a no-op in Consul, and so is
// destroying a session that is gone.
func (e *Elector) release(session string) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.t.cleanup)
	defer cancel()
	w := (&api.WriteOptions{}).WithContext(ctx)
	if _, _, err := e.cfg.Client.KV().Release(&api.KVPair{Key: e.cfg.Key, Value: e.cfg.Value, Session: session}, w); err != nil {
		return err
	}
	_, err := e.cfg.Client.Session().Destroy(session, w)
	return err
}

// retryOrphans cleans up the sessions earlier cleanups could not. Their
// terms ended and their work stopped, so releasing their lock is safe.
func (e *Elector) retryOrphans() {
	kept := e.orphans[:0]
	for _, id := range e.orphans {
		if err := e.release(id); err != nil {
			kept = append(kept, id)
			continue
		}
		e.log.Info("released and destroyed an earlier session", "session", id)
	}
	e.orphans = kept
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
