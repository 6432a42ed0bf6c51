package lease

import (
	"sync"
	"time"
)

// Manager hands out a node's leases: one per distinct (session TTL, lock
// delay), since both are properties of a session, so every hold with the
// defaults (10s, 1s) shares one session.
type Manager struct {
	base Config

	mu     sync.Mutex
	leases map[[2]time.Duration]*Lease
	closed bool
}

// NewManager returns a manager whose leases take Client, Node, Checks, Log
// and Now from base; TTL and LockDelay come from each Lease call.
func NewManager(base Config) *Manager {
	return &Manager{base: base, leases: map[[2]time.Duration]*Lease{}}
}

// Lease returns the lease for ttl and lockDelay (zero: the defaults),
// making it on first use.
func (m *Manager) Lease(ttl, lockDelay time.Duration) *Lease {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if lockDelay <= 0 {
		lockDelay = DefaultLockDelay
	}
	k := [2]time.Duration{ttl, lockDelay}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[k]; l != nil {
		return l
	}
	cfg := m.base
	cfg.TTL, cfg.LockDelay = ttl, lockDelay
	if cfg.Log != nil {
		cfg.Log = cfg.Log.With("session_ttl", ttl, "lock_delay", lockDelay)
	}
	l := New(cfg)
	if m.closed {
		l.Close()
	}
	m.leases[k] = l
	return l
}

// Close closes every lease; see Lease.Close.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	all := make([]*Lease, 0, len(m.leases))
	for _, l := range m.leases {
		all = append(all, l)
	}
	m.mu.Unlock()
	for _, l := range all {
		l.Close()
	}
}
