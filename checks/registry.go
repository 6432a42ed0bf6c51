package checks

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// Result is what a TTL check reports: its status and output.
type Result struct {
	Health string // api.HealthPassing | api.HealthWarning | api.HealthCritical
	Output string
}

type entry struct {
	reg        *api.AgentServiceRegistration
	registered bool
	status     Result
	pushed     Result // what Consul last got for the supervisor check
	dirty      bool   // status not yet pushed
	pushedAt   time.Time
	every      time.Duration // heartbeat
	// ttls are the other TTL checks mariposa reports (args checks).
	ttls map[string]*ttlCheck
}

// ttlCheck is the newest result of an args check.
type ttlCheck struct {
	st    Result
	dirty bool   // not yet pushed
	seq   uint64 // counts results, so a push clears only the result it sent
}

// Registry keeps this node's mariposa services registered with the local
// agent and their supervisor checks current. One goroutine (Run) talks to
// Consul; the methods only record intent, so a slow or absent agent never
// blocks a supervisor.
type Registry struct {
	agent   *api.Agent
	catalog *api.Catalog
	node    string
	addr    string
	log     hclog.Logger
	// Heartbeat is how often an unchanged status is pushed again (below the
	// supervisor check's TTL).
	heartbeat time.Duration

	mu      sync.Mutex
	entries map[string]*entry
	// gone are services whose deregistration has not reached the agent
	// yet; retried until it does. An agent restarted from its data
	// directory would otherwise bring them back.
	gone map[string]bool
	kick chan struct{}
	// calls bounds the agent calls in flight from Deregister: stopping a
	// thousand services at once must not run into the agent's limit of
	// connections per client (http_max_conns_per_client, 200 by default).
	calls chan struct{}
	// resync asks Run to compare the agent's services with ours.
	resync bool
}

// NewRegistry returns a registry for the agent of node (at address addr)
// that heartbeats every heartbeat.
func NewRegistry(client *api.Client, node, addr string, log hclog.Logger, heartbeat time.Duration) *Registry {
	return &Registry{agent: client.Agent(), catalog: client.Catalog(), node: node, addr: addr,
		log: log.Named("registry"), heartbeat: heartbeat,
		entries: map[string]*entry{}, gone: map[string]bool{}, kick: make(chan struct{}, 1),
		calls: make(chan struct{}, 16)}
}

func (r *Registry) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Register asks for reg to be registered (again, if it changed). The last
// check of reg is the TTL check that SetStatus reports.
func (r *Registry) Register(reg *api.AgentServiceRegistration, st Result) {
	r.RegisterHeartbeat(reg, st, r.heartbeat)
}

// RegisterHeartbeat is Register with its own heartbeat period.
func (r *Registry) RegisterHeartbeat(reg *api.AgentServiceRegistration, st Result, every time.Duration) {
	r.mu.Lock()
	delete(r.gone, reg.ID)
	r.entries[reg.ID] = &entry{reg: reg, status: st, dirty: true, every: every, ttls: map[string]*ttlCheck{}}
	r.mu.Unlock()
	r.poke()
}

// UpdateMeta replaces the meta of serviceID's registration, which Run
// registers again (with its current check status); nothing when the
// service is not registered here.
func (r *Registry) UpdateMeta(serviceID string, meta map[string]string) {
	r.mu.Lock()
	e, ok := r.entries[serviceID]
	if ok {
		reg := *e.reg
		reg.Meta = meta
		e.reg, e.registered = &reg, false
	}
	r.mu.Unlock()
	if ok {
		r.poke()
	}
}

// SetStatus records the supervisor check's status; Run pushes the newest.
func (r *Registry) SetStatus(serviceID string, st Result) {
	r.mu.Lock()
	if e, ok := r.entries[serviceID]; ok && e.status != st {
		e.status, e.dirty = st, true
	}
	r.mu.Unlock()
	r.poke()
}

// SetCheck records a result of another TTL check of the service (an args
// check run by mariposa). Every result is pushed, changed or not: each push
// resets the check's TTL, so an args check whose result never changes must
// still be pushed on every run or it expires ("TTL expired", critical) and
// restarts a healthy service. An unchanged result costs one local agent call
// and no catalog write: the agent syncs only changes.
func (r *Registry) SetCheck(serviceID, checkID string, st Result) {
	r.mu.Lock()
	if e, ok := r.entries[serviceID]; ok {
		tc := e.ttls[checkID]
		if tc == nil {
			tc = &ttlCheck{}
			e.ttls[checkID] = tc
		}
		tc.st, tc.dirty = st, true
		tc.seq++
	}
	r.mu.Unlock()
	r.poke()
}

// Resync makes Run check that the agent still has every registration (after
// an agent restart that lost its state, say).
func (r *Registry) Resync() {
	r.mu.Lock()
	r.resync = true
	r.mu.Unlock()
	r.poke()
}

// Deregister removes the service now: it waits for a free call slot (until
// ctx ends), then tries for up to 2s. When the agent cannot be reached by
// then, Run keeps trying in the background, and Flush tries once more.
func (r *Registry) Deregister(ctx context.Context, serviceID string) error {
	r.mu.Lock()
	delete(r.entries, serviceID)
	r.gone[serviceID] = true
	r.mu.Unlock()
	select {
	case r.calls <- struct{}{}:
		defer func() { <-r.calls }()
	case <-ctx.Done():
		r.poke()
		return ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var err error
	for {
		if err = r.agent.ServiceDeregisterOpts(serviceID, (&api.QueryOptions{}).WithContext(ctx)); err == nil || isNotFound(err) {
			r.mu.Lock()
			delete(r.gone, serviceID)
			r.mu.Unlock()
			return nil
		}
		var se api.StatusError
		if !errors.As(err, &se) {
			// No agent there (not a busy one): do not hold a call slot
			// retrying; Run and Flush try again.
			r.poke()
			return err
		}
		select {
		case <-ctx.Done():
			r.poke()
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Flush deregisters what is still waiting to be, until ctx ends: the last
// thing a stopping mariposa does with the agent. The calls go through the
// call slots side by side, so a slow agent is given as many at once as it
// takes; an absent one fails each at once.
func (r *Registry) Flush(ctx context.Context) error {
	r.mu.Lock()
	var gone []string
	for id := range r.gone {
		gone = append(gone, id)
	}
	r.mu.Unlock()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, id := range gone {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Deregister(ctx, id); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// Run pushes registrations and statuses until ctx ends.
func (r *Registry) Run(ctx context.Context) {
	// A fine tick; each entry is refreshed on its own period.
	tick := time.NewTicker(min(r.heartbeat, 250*time.Millisecond))
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-tick.C:
			if !r.markStale() {
				continue // nothing due: no pass over the entries
			}
		case <-retry.C:
		}
		if err := r.sync(ctx); err != nil {
			failures++
			// Capped so registrations are back soon after the agent is.
			d := min(50*time.Millisecond<<min(failures, 5), time.Second)
			if failures == 1 || failures%30 == 0 {
				r.log.Warn("cannot reach the Consul agent; will retry", "error", err, "retry_in", d)
			}
			retry.Reset(d)
		} else {
			if failures > 0 {
				// The agent may have come back without our registrations.
				r.log.Info("Consul agent reachable again; checking registrations")
				r.Resync()
			}
			failures = 0
		}
	}
}

// markStale marks the entries due for a heartbeat, and says whether there
// were any.
func (r *Registry) markStale() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	marked := false
	for _, e := range r.entries {
		if !e.pushedAt.After(now.Add(-e.every)) {
			e.dirty, marked = true, true
			for _, tc := range e.ttls {
				tc.dirty = true
			}
		}
	}
	return marked
}

// sync does the work for every entry that needs it; the first error stops
// the round and Run retries.
func (r *Registry) sync(ctx context.Context) error {
	r.mu.Lock()
	resync := r.resync
	r.resync = false
	r.mu.Unlock()
	if resync {
		have, err := r.agent.ServicesWithFilterOpts("", (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			r.mu.Lock()
			r.resync = true
			r.mu.Unlock()
			return err
		}
		r.mu.Lock()
		for id, e := range r.entries {
			if _, ok := have[id]; !ok && e.registered {
				r.log.Info("service missing from the agent; registering again", "service_id", id)
				e.registered = false
			}
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	var gone []string
	for id := range r.gone {
		gone = append(gone, id)
	}
	r.mu.Unlock()
	for _, id := range gone {
		r.mu.Lock()
		still := r.gone[id] // not registered again meanwhile
		r.mu.Unlock()
		if !still {
			continue
		}
		if err := r.agent.ServiceDeregisterOpts(id, (&api.QueryOptions{}).WithContext(ctx)); err != nil && !isNotFound(err) {
			return err
		}
		r.mu.Lock()
		delete(r.gone, id)
		r.mu.Unlock()
		r.log.Info("deregistered after the agent came back", "service_id", id)
	}
	for _, id := range r.ids() {
		r.mu.Lock()
		e, ok := r.entries[id]
		if !ok {
			r.mu.Unlock()
			continue
		}
		reg, registered, st, dirty := e.reg, e.registered, e.status, e.dirty
		r.mu.Unlock()

		if !registered {
			// The supervisor check carries its current status from the start.
			reg.Checks[len(reg.Checks)-1].Status = st.Health
			err := r.agent.ServiceRegisterOpts(reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx))
			if err != nil {
				return err
			}
			r.log.Debug("registered", "service_id", id)
			r.mu.Lock()
			if e2 := r.entries[id]; e2 == e {
				e.registered = true
				e.pushed = Result{Health: st.Health}
				for _, tc := range e.ttls {
					tc.dirty = true
				}
			}
			r.mu.Unlock()
			dirty = true
		}
		if dirty {
			r.mu.Lock()
			prev := e.pushed
			r.mu.Unlock()
			if err := r.update(ctx, id, SupervisorCheckID(id), st); err != nil {
				return err
			}
			if prev.Health == st.Health && prev.Output != st.Output {
				if err := r.publishOutput(ctx, reg, st); err != nil {
					return err
				}
			}
			r.mu.Lock()
			if e.status == st {
				e.dirty = false
			}
			e.pushed = st
			e.pushedAt = time.Now()
			r.mu.Unlock()
		}
		r.mu.Lock()
		var pending []string
		for cid, tc := range e.ttls {
			if tc.dirty {
				pending = append(pending, cid)
			}
		}
		r.mu.Unlock()
		for _, cid := range pending {
			r.mu.Lock()
			tc := e.ttls[cid]
			cst, seq := tc.st, tc.seq
			r.mu.Unlock()
			// Still dirty after an error: the next round (within a second,
			// or at the next result) sends the newest result.
			if err := r.update(ctx, id, cid, cst); err != nil {
				return err
			}
			r.mu.Lock()
			if tc.seq == seq {
				tc.dirty = false
			}
			r.mu.Unlock()
		}
	}
	return nil
}

func (r *Registry) update(ctx context.Context, serviceID, checkID string, st Result) error {
	err := r.agent.UpdateTTLOpts(checkID, truncate(st.Output, 4000), st.Health, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil && isNotFound(err) {
		// The agent lost the check (restarted without state): register again.
		r.mu.Lock()
		if e, ok := r.entries[serviceID]; ok {
			e.registered = false
		}
		r.mu.Unlock()
		r.poke()
		return nil
	}
	return err
}

// publishOutput writes the supervisor check's output to the catalog. The
// agent syncs a status change at once but holds an output-only change for up
// to check_update_interval (5m by default), and "restarting in 2s" turning
// into "failed: 10 restarts in 5m" must not wait that long. The agent's own
// copy already has the same output (UpdateTTL), so anti-entropy agrees with
// this write. SkipNodeUpdate keeps the node untouched, so service:write is
// all the ACL this needs.
func (r *Registry) publishOutput(ctx context.Context, reg *api.AgentServiceRegistration, st Result) error {
	sup := reg.Checks[len(reg.Checks)-1]
	_, err := r.catalog.Register(&api.CatalogRegistration{
		Node:           r.node,
		Address:        r.addr,
		SkipNodeUpdate: true,
		Check: &api.AgentCheck{
			Node: r.node, CheckID: sup.CheckID, Name: sup.Name, Notes: sup.Notes, Type: "ttl",
			Status: st.Health, Output: truncate(st.Output, 4000), ServiceID: reg.ID, ServiceName: reg.Name,
		},
	}, (&api.WriteOptions{}).WithContext(ctx))
	return err
}

func (r *Registry) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.entries))
	for id := range r.entries {
		ids = append(ids, id)
	}
	return ids
}

// Registered reports whether serviceID is currently registered.
func (r *Registry) Registered(serviceID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[serviceID]
	return ok && e.registered
}

func isNotFound(err error) bool {
	var se api.StatusError
	if errors.As(err, &se) && se.Code == 404 {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "404") || strings.Contains(s, "Unknown check") ||
		strings.Contains(s, "Unknown service") || strings.Contains(s, "does not have associated TTL")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
