// Package render feeds services with Consul data: it gates their start on
// dependencies (depends_on) and renders their templates, with consul-template's
// own template functions, dependency queries and blocking-query views.
//
// One Manager serves every service of a mariposa process. It runs one
// blocking query per distinct piece of data (a key, a prefix, a service with a
// tag and health filter, ...), however many templates and dependencies use it,
// and wakes only the templates and dependency gates that read it.
package render

import (
	"context"
	"sync"
	"time"

	dep "github.com/hashicorp/consul-template/dependency"
	ctemplate "github.com/hashicorp/consul-template/template"
	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/schema"
)

// Options tune a Manager. The zero value is what mariposa uses.
type Options struct {
	// BlockWait bounds each blocking query; default 5m.
	BlockWait time.Duration
	// MaxStale lets a query be answered by any server when its data is at
	// most this old; default 2s (consul-template's default). Negative: always
	// ask the leader.
	MaxStale time.Duration
	// MaxOutput caps the size of one rendered template; default 1 MiB.
	MaxOutput int
	// MaxRetryDelay caps the backoff between failed queries; default 1s.
	MaxRetryDelay time.Duration
	// Observe, if set, sees each render of a service's template that
	// had all its data: changed says it wrote a changed file, failed that
	// it ended in an error (the metrics). It must not block.
	Observe func(service string, changed, failed bool)
	// AfterUpgrade: this mariposa took over running services from the
	// previous build (an upgrade in place). A first render that changes
	// a file the previous build rendered is then an event like any later
	// one: the data changed meanwhile, and the service runs.
	AfterUpgrade bool
}

func (o *Options) defaults() {
	if o.BlockWait == 0 {
		o.BlockWait = 5 * time.Minute
	}
	if o.MaxStale == 0 {
		o.MaxStale = 2 * time.Second
	} else if o.MaxStale < 0 {
		o.MaxStale = 0
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = 1 << 20
	}
	if o.MaxRetryDelay == 0 {
		o.MaxRetryDelay = time.Second
	}
}

// subscriber is told when the data of a dependency it reads has changed.
type subscriber interface {
	dataChanged()
}

// watched is one distinct dependency, its query and who reads it.
type watched struct {
	view *view
	subs map[subscriber]struct{}
	// gen is the Manager's gen when the data last arrived (0: never).
	gen uint64
}

// Manager owns the shared data queries of one mariposa process.
type Manager struct {
	log     hclog.Logger
	opts    Options
	clients *dep.ClientSet
	brain   *ctemplate.Brain
	initErr error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // service goroutines

	mu       sync.Mutex
	gen      uint64 // counts deliveries: data of a gen <= g was in the brain at g
	deps     map[string]*watched
	services map[*schema.Service]*ServiceData
	failing  int // queries failing now, for logging transitions
}

// NewManager prepares a manager for the agent that cfg points at (the same
// settings as mariposa's own client: address, token, TLS). Nothing is queried
// until a service asks for data. It routes the standard logger through log
// (see RouteStdLog).
func NewManager(cfg *api.Config, log hclog.Logger, opts ...Options) *Manager {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.defaults()
	log = log.Named("render")
	RouteStdLog(log.Named("consul-template"))
	m := &Manager{
		log:      log,
		opts:     o,
		brain:    ctemplate.NewBrain(),
		deps:     map[string]*watched{},
		services: map[*schema.Service]*ServiceData{},
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.clients, m.initErr = newClientSet(cfg)
	if m.initErr != nil {
		m.clients = dep.NewClientSet()
	}
	return m
}

// Run serves until ctx ends, then stops every query and every service's
// goroutines. Queries and renders run from Service on; Run only bounds
// their life.
func (m *Manager) Run(ctx context.Context) {
	if m.initErr != nil {
		m.log.Error("cannot build the Consul client for templates and dependencies", "error", m.initErr)
	}
	<-ctx.Done()
	m.mu.Lock()
	m.cancel()
	for k, w := range m.deps {
		w.view.halt()
		delete(m.deps, k)
	}
	m.mu.Unlock()
	m.wg.Wait()
	m.clients.Stop()
	// In-flight blocking queries cannot be interrupted (consul-template's
	// Fetch takes no context); they end with their wait. Do not wait for them.
}

func (m *Manager) queryFailed(d dep.Dependency, err error, failures int) {
	if failures == 1 {
		m.mu.Lock()
		m.failing++
		n := m.failing
		m.mu.Unlock()
		if n == 1 {
			m.log.Warn("Consul query failed; retrying", "query", redactNames(d.String()), "error", redactNames(err.Error()))
		} else {
			m.log.Debug("Consul query failed; retrying", "query", redactNames(d.String()), "error", redactNames(err.Error()))
		}
	} else if failures%100 == 0 {
		m.log.Warn("Consul query still failing", "query", redactNames(d.String()), "error", redactNames(err.Error()), "attempts", failures)
	}
}

func (m *Manager) queryRecovered(d dep.Dependency, failures int) {
	m.mu.Lock()
	m.failing--
	n := m.failing
	m.mu.Unlock()
	if n == 0 {
		m.log.Info("Consul queries answer again", "query", redactNames(d.String()), "after_attempts", failures)
	}
}

// deliver stores new data and wakes its readers, inline on the view's
// goroutine (the readers' work is a non-blocking send or a few counts).
func (m *Manager) deliver(v *view, data any) {
	m.mu.Lock()
	w := m.deps[v.d.String()]
	if w == nil || w.view != v {
		// Its last reader left while the answer was in flight.
		m.mu.Unlock()
		return
	}
	m.brain.Remember(v.d, data)
	m.gen++
	w.gen = m.gen
	subs := make([]subscriber, 0, len(w.subs))
	for s := range w.subs {
		subs = append(subs, s)
	}
	m.mu.Unlock()
	for _, s := range subs {
		s.dataChanged()
	}
}

// watch starts (or shares) the query for d on behalf of s.
func (m *Manager) watch(s subscriber, d dep.Dependency) {
	key := d.String()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return
	}
	w := m.deps[key]
	if w == nil {
		v := &view{m: m, d: d, stop: make(chan struct{})}
		w = &watched{view: v, subs: map[subscriber]struct{}{}}
		m.deps[key] = w
		go v.run()
	}
	w.subs[s] = struct{}{}
}

// unwatch drops s's interest in d; the last reader stops the query.
func (m *Manager) unwatch(s subscriber, key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.deps[key]
	if w == nil {
		return
	}
	delete(w.subs, s)
	if len(w.subs) == 0 {
		delete(m.deps, key)
		w.view.halt()
		m.brain.Forget(w.view.d)
	}
}

// generation returns the count of deliveries so far: data delivered later has
// a greater gen.
func (m *Manager) generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// unchangedSince reports whether the data of every dependency in keys is
// still what the brain held at generation g: each is still watched and none
// has been delivered since.
func (m *Manager) unchangedSince(g uint64, keys map[string]dep.Dependency) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range keys {
		w := m.deps[k]
		if w == nil || w.gen > g {
			return false
		}
	}
	return true
}

// recall returns the last data of d, if any arrived.
func (m *Manager) recall(d dep.Dependency) (any, bool) {
	return m.brain.Recall(d)
}

// Watching returns how many distinct queries run: one per distinct
// dependency, however many services read it.
func (m *Manager) Watching() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.deps)
}

// Service starts gating and rendering for svc and returns its handle. Calling
// it again with the same *schema.Service returns the same handle (the
// instances of a unit in several slots of one node share it); each call
// wants a Remove.
func (m *Manager) Service(svc *schema.Service) *ServiceData {
	m.mu.Lock()
	if sd := m.services[svc]; sd != nil {
		sd.refs++
		m.mu.Unlock()
		return sd
	}
	sd := newServiceData(m, svc)
	sd.refs = 1
	m.services[svc] = sd
	m.mu.Unlock()
	sd.start()
	return sd
}

// Remove undoes one Service call; the last one stops svc's templates and
// dependency gates and releases the queries nothing else reads. Files
// already rendered stay.
func (m *Manager) Remove(svc *schema.Service) {
	m.mu.Lock()
	sd := m.services[svc]
	if sd != nil {
		sd.refs--
		if sd.refs > 0 {
			sd = nil // another instance still reads it
		} else {
			delete(m.services, svc)
		}
	}
	m.mu.Unlock()
	if sd != nil {
		sd.stop()
	}
}
