package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// SessionHandoff is a session an upgrade in place hands to the next image
// of mariposa: the lease it belongs to and its ID. The session is neither
// released nor destroyed on the way out, so every lock it holds (the node
// lock, leader terms, slot holds) stays held across the exec, with no lock
// delay.
type SessionHandoff struct {
	TTL       time.Duration `json:"ttl"`
	LockDelay time.Duration `json:"lock_delay"`
	ID        string        `json:"id"`
}

// Sessions lists the current session of each lease that has one.
func (m *Manager) Sessions() []SessionHandoff {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []SessionHandoff
	for k, l := range m.leases {
		if id := l.Session(); id != "" {
			out = append(out, SessionHandoff{TTL: k[0], LockDelay: k[1], ID: id})
		}
	}
	return out
}

// Adopt makes each session the current one of its lease (see Lease.Adopt).
// A session that cannot be adopted is reported and left: its lease makes a
// new one when a hold asks, and the locks it held are taken again (or
// lost) the ordinary way.
func (m *Manager) Adopt(ctx context.Context, sessions []SessionHandoff) error {
	var errs []error
	for _, s := range sessions {
		if err := m.Lease(s.TTL, s.LockDelay).Adopt(ctx, s.ID); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", s.ID, err))
		}
	}
	return errors.Join(errs...)
}

// ErrSessionGone: the session to adopt no longer exists in Consul.
var ErrSessionGone = errors.New("the session no longer exists")

// Adopt takes over session id, which the image this one replaced created
// (an upgrade in place), as the lease's current session. It renews it at
// once: a session gone meanwhile (its TTL ran out, an invalidation) is
// refused, and the renewal's send time bounds its terms as a creation's
// would. A hold acquired under the lease then finds its key already held by
// the session and takes it without a write.
func (l *Lease) Adopt(ctx context.Context, id string) error {
	l.resolveRule()
	rctx, cancel := context.WithTimeout(ctx, l.t.request)
	sent := l.now()
	entry, _, err := l.cfg.Client.Session().Renew(id, (&api.WriteOptions{}).WithContext(rctx))
	cancel()
	switch {
	case err != nil:
		return fmt.Errorf("renew: %w", err)
	case entry == nil:
		return ErrSessionGone
	case entry.TTL != l.t.ttl.String() || entry.LockDelay != l.t.lockDelay:
		return fmt.Errorf("its TTL %s and lock delay %s are not this lease's (%s, %s)", entry.TTL, entry.LockDelay, l.t.ttl, l.t.lockDelay)
	}
	s := newSession(l, id, sent)
	l.mu.Lock()
	if l.closed || l.cur != nil {
		l.mu.Unlock()
		return errors.New("the lease already has a session")
	}
	l.live[s] = struct{}{}
	l.cur = s
	l.mu.Unlock()
	s.start()
	l.log.Info("session adopted from the previous image", "session", id)
	return nil
}

// ConfirmNow confirms every confirmed hold of the current sessions at
// once, with one consistent read each, and returns when the reads have
// answered or ctx ends. An upgrade in place calls it just before the
// exec: each hold's strict deadline, which the next image must confirm by
// (Term.StrictDeadline), then counts from a read sent a moment ago rather
// than from the last periodic one, up to lockDelay/5 older, so the exec
// gets the whole lockDelay/2 the rule allows.
func (m *Manager) ConfirmNow(ctx context.Context) {
	m.mu.Lock()
	var ss []*session
	for _, l := range m.leases {
		l.mu.Lock()
		if l.cur != nil {
			ss = append(ss, l.cur)
		}
		l.mu.Unlock()
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range ss {
		if terms := s.confirmed(); len(terms) > 0 {
			wg.Add(1)
			go func() { defer wg.Done(); s.round(ctx, terms) }()
		}
	}
	wg.Wait()
}
