// Package coord hands out the tokens of coordinated template reloads
// (CLUSTER.md section 5, last paragraph) as Consul semaphores: the
// supervisor's ReloadGate on Consul.
//
// The tokens of one change are the semaphore under
//
//	mariposa/rollout/<unit>/reload/<hash>/tokens
//
// (unit: the slot's unit, or the service name; hash: what the coordinated
// templates rendered, so every instance that saw the same KV write contends
// on the same semaphore), with max_parallel as its limit. An instance
// contends with its session: its slot's for an instance in a count slot,
// the node lease's otherwise, so a token dies with its holder. A
// semaphore's contender key is <prefix>/<session>, and the instances of
// one node share their session: the gate lets one of them at a time
// contend on a prefix with a session, or two would share one key and one
// token.
package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/supervisor"
)

// RolloutPrefix is where rollouts keep their tokens (cluster.RolloutPrefix).
const RolloutPrefix = "mariposa/rollout/"

// Prefix is the semaphore of the reload of unit's instances to hash.
func Prefix(unit, hash string) string {
	return RolloutPrefix + unit + "/reload/" + hash + "/tokens"
}

// Gate is a supervisor.ReloadGate on Consul semaphores.
type Gate struct {
	client *api.Client
	log    hclog.Logger
	// SessionTTL is the TTL of the session a request without one gets
	// (default 15s).
	SessionTTL time.Duration

	mu sync.Mutex
	// busy: the (prefix, session) pairs contending or holding now; each
	// channel closes when its pair is free again.
	busy map[[2]string]chan struct{}
}

var _ supervisor.ReloadGate = (*Gate)(nil)

// New returns a gate on client.
func New(client *api.Client, log hclog.Logger) *Gate {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Gate{client: client, log: log, SessionTTL: 15 * time.Second, busy: map[[2]string]chan struct{}{}}
}

// contender is what a contender key says, for people reading the KV store.
type contender struct {
	Service string `json:"service"`
	Slot    string `json:"slot,omitempty"`
}

// Acquire waits for a token of req's semaphore; see supervisor.ReloadGate.
func (g *Gate) Acquire(ctx context.Context, req supervisor.ReloadRequest) (func(), error) {
	if req.Unit == "" || req.Hash == "" {
		return nil, fmt.Errorf("reload request without unit or hash: %+v", req)
	}
	prefix := Prefix(req.Unit, req.Hash)
	limit := max(req.Limit, 1)
	free := func() {}
	if req.Session != "" {
		var err error
		if free, err = g.turn(ctx, [2]string{prefix, req.Session}); err != nil {
			return nil, err
		}
	}
	val := contender{Service: req.Service}
	if req.Slot != nil {
		val.Slot = req.Slot.Name()
	}
	b, _ := json.Marshal(val)
	sem, err := g.client.SemaphoreOpts(&api.SemaphoreOptions{
		Prefix: prefix, Limit: limit, Value: b, Session: req.Session,
		SessionName: "mariposa reload " + req.Service, SessionTTL: g.SessionTTL.String(),
		SemaphoreWaitTime: 5 * time.Second,
		// A Consul that does not answer for a moment does not take the
		// token away (the restart under way goes on either way).
		MonitorRetries: 5, MonitorRetryTime: time.Second,
	})
	if err != nil {
		free()
		return nil, err
	}
	stop := make(chan struct{})
	waited, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			close(stop)
			// Acquire looks at stop between its blocking reads of the
			// prefix: removing the contender key ends the read under way.
			if req.Session != "" {
				_, _ = g.client.KV().Delete(path.Join(prefix, req.Session), nil)
			}
		case <-waited:
		}
	}()
	lost, err := sem.Acquire(stop)
	close(waited)
	<-watched // its delete is done: the key is not the next contender's yet
	if err != nil || lost == nil {
		// Acquire leaves its contender key behind when it gives up: take
		// it away, or it would stay as long as the (shared) session.
		if req.Session != "" {
			_, _ = g.client.KV().Delete(path.Join(prefix, req.Session), nil)
		}
		free()
		if err == nil {
			err = ctx.Err()
		}
		if err == nil {
			err = context.Canceled
		}
		return nil, err
	}
	log := g.log.With("prefix", prefix, "service", req.Service)
	if req.Slot != nil {
		log = log.With("slot", req.Slot.Name())
	}
	log.Debug("reload token acquired", "limit", limit)
	var once sync.Once
	released := make(chan struct{})
	release := func() {
		once.Do(func() {
			close(released)
			if err := sem.Release(); err != nil && err != api.ErrSemaphoreNotHeld {
				log.Debug("could not give the reload token back; it goes with its session", "error", err)
			}
			// The last one out removes the semaphore's lock key.
			_ = sem.Destroy()
			free()
			log.Debug("reload token released")
		})
	}
	go func() {
		select {
		case <-lost:
			log.Warn("reload token lost (its session ended); giving it back")
			release()
		case <-released:
		}
	}()
	return release, nil
}

// turn waits until no other request contends on key (prefix, session),
// and takes it; free gives it up.
func (g *Gate) turn(ctx context.Context, key [2]string) (free func(), err error) {
	for {
		g.mu.Lock()
		ch, taken := g.busy[key]
		if !taken {
			mine := make(chan struct{})
			g.busy[key] = mine
			g.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					g.mu.Lock()
					if g.busy[key] == mine {
						delete(g.busy, key)
					}
					g.mu.Unlock()
					close(mine)
				})
			}, nil
		}
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
