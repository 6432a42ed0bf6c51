package consulmodel

import (
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/consul/api"
)

// Session is a Consul session as the leader keeps it.
type Session struct {
	ID          string
	Node        string
	Checks      []string
	LockDelay   time.Duration
	Behavior    string // api.SessionBehaviorRelease or api.SessionBehaviorDelete
	TTL         time.Duration
	CreateIndex uint64
	deadline    time.Time // TTL sessions: when the leader's timer fires
}

// DefaultLockDelay is the lock delay of a session created without one.
const DefaultLockDelay = 15 * time.Second

// SessionSpec is what a session is created with (api.SessionEntry's
// fields the fleet uses). Checks nil means Consul's default, serfHealth;
// LockDelay 0 means DefaultLockDelay, as through the api client.
type SessionSpec struct {
	Node      string
	Checks    []string
	LockDelay time.Duration
	Behavior  string
	TTL       time.Duration
}

// CreateSession is PUT /v1/session/create at now. Like Consul it refuses
// a node the catalog does not have and a check that is missing or
// critical.
func (s *Store) CreateSession(now time.Time, spec SessionSpec) (string, error) {
	if !s.leader {
		return "", ErrNoLeader
	}
	if spec.Behavior == "" {
		spec.Behavior = api.SessionBehaviorRelease
	}
	if spec.Behavior != api.SessionBehaviorRelease && spec.Behavior != api.SessionBehaviorDelete {
		return "", fmt.Errorf("Invalid Behavior setting '%s'", spec.Behavior)
	}
	if spec.TTL != 0 && (spec.TTL < 10*time.Second || spec.TTL > 24*time.Hour) {
		return "", fmt.Errorf("Invalid Session TTL '%s', must be between [10s=24h0m0s]", spec.TTL)
	}
	if spec.Checks == nil {
		spec.Checks = []string{"serfHealth"}
	}
	n, ok := s.catalog.nodes[spec.Node]
	if !ok {
		return "", fmt.Errorf("Missing node registration")
	}
	for _, c := range spec.Checks {
		st, ok := n.checks[c]
		if !ok {
			return "", fmt.Errorf("Missing check '%s' registration", c)
		}
		if st == api.HealthCritical {
			return "", fmt.Errorf("Check '%s' is in %s state", c, st)
		}
	}
	// The api client leaves a zero LockDelay out of the request, and
	// Consul then applies its default.
	if spec.LockDelay == 0 {
		spec.LockDelay = DefaultLockDelay
	}
	delay := min(spec.LockDelay, MaxLockDelay)
	s.nextSession++
	id := fmt.Sprintf("00000000-0000-4000-8000-%012x", s.nextSession)
	se := &Session{ID: id, Node: spec.Node, Checks: append([]string(nil), spec.Checks...), LockDelay: delay,
		Behavior: spec.Behavior, TTL: spec.TTL, CreateIndex: s.raft()}
	if se.TTL > 0 {
		se.deadline = now.Add(ttlMultiplier * se.TTL)
	}
	s.sessions[id] = se
	s.sessIndex = se.CreateIndex
	return id, nil
}

// SessionInfo is GET /v1/session/info/<id> (nil when there is none).
func (s *Store) SessionInfo(id string, stale bool) (*Session, error) {
	if !stale && !s.leader {
		return nil, ErrNoLeader
	}
	se, ok := s.sessions[id]
	if !ok {
		return nil, nil
	}
	c := *se
	c.Checks = append([]string(nil), se.Checks...)
	return &c, nil
}

// Sessions lists the sessions in ID order.
func (s *Store) Sessions() []*Session {
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]*Session, 0, len(ids))
	for _, id := range ids {
		c := *s.sessions[id]
		out = append(out, &c)
	}
	return out
}

// RenewSession is PUT /v1/session/renew/<id>: it re-arms the TTL timer
// (no Raft write). A session that is gone answers false.
func (s *Store) RenewSession(now time.Time, id string) (bool, error) {
	if !s.leader {
		return false, ErrNoLeader
	}
	se, ok := s.sessions[id]
	if !ok {
		return false, nil
	}
	if se.TTL > 0 {
		se.deadline = now.Add(ttlMultiplier * se.TTL)
	}
	return true, nil
}

// DestroySession is PUT /v1/session/destroy/<id>: one Raft write that
// invalidates the session (a no-op write when it is gone).
func (s *Store) DestroySession(now time.Time, id string) error {
	if !s.leader {
		return ErrNoLeader
	}
	idx := s.raft()
	t := s.begin(idx)
	t.invalidate(now, id)
	t.commit()
	return nil
}

// invalidate is Consul's deleteSessionTxn: the session goes, and every key
// it holds is released (or deleted) with its lock delay set.
func (t *tx) invalidate(now time.Time, id string) {
	s := t.s
	se, ok := s.sessions[id]
	if !ok {
		return
	}
	delete(s.sessions, id)
	s.sessIndex = t.idx
	s.stats.Invalidations++
	for _, k := range s.keys {
		e := t.get(k)
		if e == nil || e.Session != id {
			continue
		}
		switch se.Behavior {
		case api.SessionBehaviorDelete:
			t.del(k)
		default:
			c := e.clone()
			c.Session = ""
			t.set(c, true)
		}
		if se.LockDelay > 0 {
			t.delays[k] = now.Add(se.LockDelay)
		}
	}
}

// NextSessionExpiry is when the earliest TTL timer fires (zero: none), for
// a simulator's scheduler.
func (s *Store) NextSessionExpiry() time.Time {
	var next time.Time
	for _, se := range s.sessions {
		if se.TTL > 0 && (next.IsZero() || se.deadline.Before(next)) {
			next = se.deadline
		}
	}
	return next
}

// ExpireSessions invalidates, at now, every TTL session whose timer has
// fired, one Raft write each, in ID order. Nothing expires without a
// leader: the timers live on the leader.
func (s *Store) ExpireSessions(now time.Time) []string {
	if !s.leader {
		return nil
	}
	var gone []string
	for _, se := range s.Sessions() {
		if se.TTL > 0 && !se.deadline.After(now) {
			gone = append(gone, se.ID)
		}
	}
	for _, id := range gone {
		t := s.begin(s.raft())
		t.invalidate(now, id)
		t.commit()
	}
	return gone
}
