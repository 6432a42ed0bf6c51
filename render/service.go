package render

import (
	"context"
	"sync"

	"github.com/mariposa-sh/mariposa/schema"
)

// ServiceData is one service's view of Consul data: its dependency gates and
// its templates. Its methods are safe for concurrent use. The instances of
// a service on one node (in count slots) share it, each through a Reader
// of its own.
type ServiceData struct {
	m      *Manager
	svc    *schema.Service
	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu        sync.Mutex
	gates     []*gate
	templates []*templateRunner
	badDeps   []string // dependencies that cannot be queried
	readers   map[*Reader]struct{}
	def       *Reader // the ServiceData's own Changed and State
	refs      int     // Manager.Service calls not Removed yet
}

// Reader is one reader of a ServiceData: its own change notifications, and
// its own copy of the events, so every instance sharing the data sees each
// change.
type Reader struct {
	sd      *ServiceData
	changed chan struct{}
	events  []TemplateEvent // guarded by sd.mu
}

// Reader returns a new reader of sd; Close it when done.
func (sd *ServiceData) Reader() *Reader {
	r := &Reader{sd: sd, changed: make(chan struct{}, 1)}
	sd.mu.Lock()
	sd.readers[r] = struct{}{}
	sd.mu.Unlock()
	r.changed <- struct{}{} // its first State is news
	return r
}

// Close stops r's notifications and events.
func (r *Reader) Close() {
	r.sd.mu.Lock()
	delete(r.sd.readers, r)
	r.events = nil
	r.sd.mu.Unlock()
}

// Changed receives (coalesced) whenever State may have changed.
func (r *Reader) Changed() <-chan struct{} { return r.changed }

// State returns the current snapshot and hands out r's pending events.
func (r *Reader) State() ServiceState {
	sd := r.sd
	sd.mu.Lock()
	defer sd.mu.Unlock()
	st := sd.stateLocked()
	st.Events, r.events = r.events, nil
	return st
}

// addEvent hands ev to every reader; sd.mu is held.
func (sd *ServiceData) addEvent(ev TemplateEvent) {
	for r := range sd.readers {
		r.events = append(r.events, ev)
	}
}

// ServiceState is a snapshot of a service's data.
type ServiceState struct {
	// DepsSatisfied: every depends_on condition holds now.
	DepsSatisfied bool
	// Waiting says what the service waits for, as the supervisor check
	// shows it: the first unmet dependency, else the first template that has
	// not rendered yet (its missing data, or its error; "failed: ..." as in
	// Failed when it can never render). "" when ready.
	Waiting string
	// Deps are the dependencies in declaration order (for on_lost).
	Deps []DepState
	// DepEnv is <PREFIX>_ADDR, _ADDRS, _HOST, _PORT of every dependency.
	DepEnv []string
	// TemplatesReady: every template rendered at least once.
	TemplatesReady bool
	// TemplateEnv are the KEY=VALUE lines of env = true templates, in
	// template order.
	TemplateEnv []string
	// Hashes are, per template in the service's order, a hash of the
	// output of its last good render ("" before the first). Instances that
	// rendered the same data have the same hashes: coordinated reloads
	// contend on them.
	Hashes []string
	// Events are the renders that changed a file since the previous State
	// call (first renders are not events: nothing runs yet). State hands
	// each event out once.
	Events []TemplateEvent
	// Errors are the current render errors; each template that has one
	// keeps its last good file.
	Errors []string
	// Failed is set when a template can never render: its text cannot be
	// read or parsed (e.g. `failed: template conf/web.conf:
	// web.conf.tpl:3:12: function "kye" not defined`). Unlike missing data
	// this does not resolve by waiting; the service should fail. "" when fine.
	Failed string
}

// Ready reports whether the process may start.
func (s ServiceState) Ready() bool { return s.Failed == "" && s.DepsSatisfied && s.TemplatesReady }

func newServiceData(m *Manager, svc *schema.Service) *ServiceData {
	sd := &ServiceData{m: m, svc: svc, readers: map[*Reader]struct{}{}}
	sd.ctx, sd.cancel = context.WithCancel(m.ctx)
	for _, d := range svc.Depends {
		g, err := newGate(sd, d)
		if err != nil {
			sd.badDeps = append(sd.badDeps, err.Error())
			continue
		}
		sd.gates = append(sd.gates, g)
	}
	sb := &sandbox{root: serviceDir(svc), env: svc.Env, maxFile: m.opts.MaxOutput}
	for _, t := range svc.Templates {
		sd.templates = append(sd.templates, newTemplateRunner(sd, t, sb))
	}
	return sd
}

// serviceDir is where a service's templates may read files: its dir, or the
// directory of its file when dir is unset (as destinations resolve).
func serviceDir(svc *schema.Service) string {
	if svc.Dir != "" {
		return svc.Dir
	}
	return svc.SourceDir
}

func (sd *ServiceData) start() {
	for _, g := range sd.gates {
		sd.m.watch(g, g.query)
		// The data may already be known from another reader.
		if _, ok := sd.m.recall(g.query); ok {
			g.dataChanged()
		}
	}
	for _, r := range sd.templates {
		sd.done.Add(1)
		sd.m.wg.Add(1)
		go func() {
			defer sd.m.wg.Done()
			defer sd.done.Done()
			r.run(sd.ctx)
		}()
	}
	sd.notify()
}

func (sd *ServiceData) stop() {
	sd.cancel()
	sd.done.Wait()
	for _, g := range sd.gates {
		sd.m.unwatch(g, g.query.String())
	}
}

func (sd *ServiceData) notify() {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	for r := range sd.readers {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

// own is sd's own reader, for Changed and State on the ServiceData itself
// (one reader: a service on one node, and the tests).
func (sd *ServiceData) own() *Reader {
	sd.mu.Lock()
	r := sd.def
	sd.mu.Unlock()
	if r != nil {
		return r
	}
	r = sd.Reader()
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if sd.def != nil { // another call made one first
		delete(sd.readers, r)
		return sd.def
	}
	sd.def = r
	return r
}

// Changed receives (coalesced) whenever State may have changed: sd's own
// reader's (see Reader).
func (sd *ServiceData) Changed() <-chan struct{} { return sd.own().Changed() }

// State returns the current snapshot and hands out the pending events of
// sd's own reader.
func (sd *ServiceData) State() ServiceState { return sd.own().State() }

// stateLocked is the current snapshot, without events; sd.mu is held.
func (sd *ServiceData) stateLocked() ServiceState {
	st := ServiceState{DepsSatisfied: len(sd.badDeps) == 0, TemplatesReady: true}
	if len(sd.badDeps) > 0 {
		st.Waiting = "waiting: " + sd.badDeps[0]
	}
	for _, g := range sd.gates {
		ds := g.state
		st.Deps = append(st.Deps, ds)
		st.DepEnv = append(st.DepEnv, g.env(ds)...)
		if !ds.Satisfied {
			st.DepsSatisfied = false
			if st.Waiting == "" {
				st.Waiting = ds.Waiting
			}
		}
	}
	for _, r := range sd.templates {
		if r.err != "" {
			st.Errors = append(st.Errors, r.err)
		}
		if r.failed != "" && st.Failed == "" {
			st.Failed = r.failed
		}
		if !r.rendered {
			st.TemplatesReady = false
			if st.Waiting == "" {
				if r.failed != "" {
					st.Waiting = r.failed
				} else if r.waiting != "" {
					st.Waiting = r.waiting
				} else if r.err != "" {
					st.Waiting = "waiting: " + r.err
				} else {
					st.Waiting = "waiting: template " + r.name + " is rendering"
				}
			}
		}
		if r.t.Env {
			st.TemplateEnv = append(st.TemplateEnv, r.env...)
		}
		st.Hashes = append(st.Hashes, r.hash)
	}
	return st
}
