package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// NodeLockKey is the key of node's supervisor lock: one mariposa per node.
func NodeLockKey(node string) string { return "mariposa/nodes/" + node + "/supervisor" }

// NodeLockWait is how long a starting supervisor waits for the node lock of
// one that crashed: its liveness check goes critical within livenessTTL,
// which invalidates its session and frees the lock; lock delay then keeps
// the key for lockDelay; plus a margin for the agent to tell the servers.
func NodeLockWait(livenessTTL, lockDelay time.Duration) time.Duration {
	return livenessTTL + lockDelay + 2*time.Second
}

// NodeInfo is the node lock's value: who supervises the node.
type NodeInfo struct {
	PID      int       `json:"pid"`
	Hostname string    `json:"hostname"`
	Node     string    `json:"node"`
	Started  time.Time `json:"started"`
}

// HeldError says another supervisor holds the node lock.
type HeldError struct {
	Node    string
	Session string    // the holder's session
	Holder  *NodeInfo // nil when the key's value is not a NodeInfo
}

func (e *HeldError) Error() string {
	who := "another mariposa (session " + e.Session + ")"
	since := ""
	if h := e.Holder; h != nil {
		who = fmt.Sprintf("another mariposa (pid %d on host %s)", h.PID, h.Hostname)
		if !h.Started.IsZero() {
			since = " since " + sinceText(h.Started, time.Now())
		}
	}
	return fmt.Sprintf("%s supervises node %s%s; stop it first, or run with -allow-second-supervisor", who, e.Node, since)
}

// sinceText is t's clock time, with the date unless t is today.
func sinceText(t, now time.Time) string {
	t = t.In(now.Location())
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04:05")
}

func heldError(node string, pair *api.KVPair) *HeldError {
	e := &HeldError{Node: node, Session: pair.Session}
	var info NodeInfo
	if json.Unmarshal(pair.Value, &info) == nil && (info.PID != 0 || info.Hostname != "") {
		e.Holder = &info
	}
	return e
}

// WaitNodeLockFree waits up to wait until nobody holds node's lock, reading
// only: a starting supervisor calls it before it registers anything or
// heartbeats the liveness check, so that the session of a supervisor that
// was killed (SIGKILL, crash) is invalidated when that check's TTL runs
// out. It returns nil once the key is free, a *HeldError when it is still
// held after wait (a live supervisor), or another error when Consul cannot
// be read.
func WaitNodeLockFree(ctx context.Context, c *api.Client, node string, wait time.Duration, log hclog.Logger) error {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	key := NodeLockKey(node)
	deadline := time.Now().Add(wait)
	var index uint64
	logged := false
	for {
		w := max(time.Until(deadline), 0)
		if index == 0 {
			w = 0
		}
		rctx, cancel := context.WithTimeout(ctx, w+w/16+5*time.Second)
		pair, meta, err := c.KV().Get(key, (&api.QueryOptions{
			WaitIndex: index, WaitTime: w, RequireConsistent: true,
		}).WithContext(rctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s: %w", key, err)
		}
		if pair == nil || pair.Session == "" {
			return nil
		}
		held := heldError(node, pair)
		if !time.Now().Before(deadline) {
			return held
		}
		if !logged {
			log.Info("another supervisor holds the node lock; waiting for it to go, as a crashed one's does",
				"key", key, "holder", held.Error(), "wait", wait)
			logged = true
		}
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
	}
}

// NodeLock is this supervisor's hold on its node's lock.
type NodeLock struct {
	l    *Lease
	node string
	info NodeInfo
	hold Hold
	log  hclog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	lost   chan struct{}

	mu   sync.Mutex
	term *Term
	err  error
}

// AcquireNodeLock takes node's lock under the lease, writing info as its
// value, after WaitNodeLockFree said the key is free and once the liveness
// check the lease is bound to passes (the lease waits for it). It waits
// out a lock delay left by a crashed holder, and fails with a *HeldError,
// at once, when another session holds the key: another supervisor started
// at the same moment and won.
//
// The lock is a hold like any other: confirmed with the lease's other
// holds, lost with its session. When a term of it ends (session
// invalidated, confirmations late, key deleted), the NodeLock takes the
// key again, with a new session if the old one was lost; it gives up only
// when another supervisor holds it, and then Lost closes.
func (l *Lease) AcquireNodeLock(ctx context.Context, node string, info NodeInfo) (*NodeLock, error) {
	if node == "" {
		return nil, errors.New("lease: the node lock needs a node name")
	}
	if info.Node == "" {
		info.Node = node
	}
	value, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	key := NodeLockKey(node)
	log := l.log.With("key", key)
	// The node lock fences nothing time-critical: it keeps a second
	// supervisor out. It costs no confirmation reads on an idle node.
	h := Hold{Key: key, Value: value, Log: log, Unconfirmed: true}
	t, err := l.acquireNode(ctx, node, info, h)
	if err != nil {
		return nil, err
	}
	n := &NodeLock{l: l, node: node, info: info, hold: h, log: log,
		done: make(chan struct{}), lost: make(chan struct{}), term: t}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	go n.keep()
	log.Info("node lock held", "session", t.Session)
	return n, nil
}

// acquireNode acquires the node lock once, failing when another supervisor
// holds it.
func (l *Lease) acquireNode(ctx context.Context, node string, info NodeInfo, h Hold) (*Term, error) {
	for {
		t, err := l.acquire(ctx, h, true)
		var held *errHeld
		if !errors.As(err, &held) {
			return t, err
		}
		he := heldError(node, held.pair)
		if he.Holder == nil || he.Holder.PID != info.PID || he.Holder.Hostname != info.Hostname ||
			!he.Holder.Started.Equal(info.Started) {
			return nil, he
		}
		// An earlier session of this very process, whose release failed:
		// it goes with that session.
		if !sleep(ctx, l.t.retry) {
			return nil, ctx.Err()
		}
	}
}

// Info is what the lock's value says.
func (n *NodeLock) Info() NodeInfo { return n.info }

// Lost closes when the node lock is lost for good: another supervisor
// holds it (Err says which). mariposa must then exit non-zero, and must not
// deregister anything: the registrations are the other supervisor's now.
func (n *NodeLock) Lost() <-chan struct{} { return n.lost }

// Err is the *HeldError naming the supervisor that took the lock, once Lost
// closed; nil before.
func (n *NodeLock) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Session is the session holding the lock now, "" while it is retaken.
func (n *NodeLock) Session() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.term == nil || isClosed(n.term.Lost()) {
		return ""
	}
	return n.term.Session
}

// Release stops keeping the lock and releases it, so the next supervisor
// takes it at once: call it last when mariposa stops, after deregistering.
func (n *NodeLock) Release() error {
	n.cancel()
	<-n.done
	n.mu.Lock()
	t := n.term
	n.term = nil
	n.mu.Unlock()
	if t == nil {
		return nil
	}
	return t.Release()
}

// keep takes the lock again after each term ends, until Release or until
// another supervisor holds it.
func (n *NodeLock) keep() {
	defer close(n.done)
	for {
		n.mu.Lock()
		t := n.term
		n.mu.Unlock()
		select {
		case <-t.Lost():
		case <-n.ctx.Done():
			return
		}
		reason := t.Err()
		if err := t.Release(); err != nil {
			n.log.Debug("cannot release the lost node lock", "error", err)
		}
		n.mu.Lock()
		n.term = nil
		n.mu.Unlock()
		n.log.Warn("node lock lost; taking it again", "reason", reason)
		backoff := n.l.t.retry
		for {
			nt, err := n.l.acquireNode(n.ctx, n.node, n.info, n.hold)
			if err == nil {
				n.mu.Lock()
				n.term = nt
				n.mu.Unlock()
				n.log.Info("node lock held again", "session", nt.Session)
				break
			}
			if n.ctx.Err() != nil {
				return
			}
			var he *HeldError
			if errors.As(err, &he) {
				n.mu.Lock()
				n.err = he
				n.mu.Unlock()
				n.log.Error("node lock taken by another supervisor", "error", he)
				close(n.lost)
				return
			}
			n.log.Debug("cannot take the node lock again; retrying", "error", err)
			if !sleep(n.ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}
