// Package httpapi is the node's HTTP API (mariposa run -http-addr): what
// this node runs (/v1/status), its recent supervisor events (/v1/events,
// ?follow=1 streams them), each service's recent output (/v1/logs/...),
// operator actions (POST /v1/restart/..., /v1/reset/...) and Prometheus
// metrics (/metrics). Its address is registered with mariposa's own Consul
// service, so tools and Prometheus find every node's API through Consul.
//
// It is protected as Consul is: when Consul enforces ACLs, a request needs
// a Consul token (X-Consul-Token, or Authorization: Bearer) that Consul
// says has the permission the request needs:
//
//	GET  /v1/status, /v1/events, /v1/services  node:read on this node; each service shown needs service:read
//	GET  /v1/logs/SERVICE                      service:read on SERVICE
//	POST /v1/restart/SERVICE, /v1/reset/SERVICE service:write on SERVICE
//	GET  /metrics                              agent:read on this node (as Consul's /v1/agent/metrics)
//
// Without ACLs, no token is needed. When Consul cannot answer, its last
// answers stand (its own extend-cache down policy). It never serves a
// secret: no environment, no rendered file, no token.
package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/internal/logring"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// DefaultAddr is where the API listens by default: loopback only.
const DefaultAddr = "127.0.0.1:8585"

// Config configures a Server.
type Config struct {
	// Addr is the address to listen on (host:port; port 0 picks one).
	Addr string
	// Node is this node's Consul name ("" until it is known).
	Node func() string
	// Snapshots is every instance's state (supervisor.Runner.Snapshots).
	Snapshots func() []supervisor.Snapshot
	// Events are the node's recent supervisor events.
	Events *EventLog
	// Target and Logs are what the control API acts on and reads (the
	// same as the control socket's).
	Target control.Target
	Logs   *logring.Set
	// Metrics serves /metrics (promhttp); nil: 404.
	Metrics http.Handler
	// Volumes serves /v1/volumes/ (internal/volume: the snapshots this
	// node hands off); nil: 404. Its token needs service:read on the unit,
	// and the handler checks that the caller holds the slot.
	Volumes http.Handler
	// Auth decides what a request's token may do; nil: everything is
	// allowed (tests only).
	Auth *Authorizer
	// Warnings, if set, are GET /v1/status's warnings.
	Warnings func() []string
	Log      hclog.Logger
}

// Server is the node's HTTP API.
type Server struct {
	cfg     Config
	log     hclog.Logger
	control *control.Handlers
	ln      net.Listener
	srv     *http.Server
	cancel  context.CancelFunc

	closeOnce sync.Once
}

type callerKey struct{}

// caller is who made a request, for the log: never the token.
type caller struct {
	remote   string
	accessor string
}

// Listen binds cfg.Addr and returns the server, not yet serving: call
// Serve, and Close on shutdown.
func Listen(cfg Config) (*Server, error) {
	if cfg.Node == nil || cfg.Snapshots == nil || cfg.Events == nil || cfg.Target == nil || cfg.Logs == nil {
		return nil, errors.New("httpapi: Listen needs Node, Snapshots, Events, Target and Logs")
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	log := cfg.Log.Named("http")
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("the HTTP API cannot listen on %s: %w", cfg.Addr, err)
	}
	s := &Server{cfg: cfg, log: log, ln: ln}
	s.control = control.NewHandlers(cfg.Target, cfg.Logs, log, func(r *http.Request) control.Caller {
		c, _ := r.Context().Value(callerKey{}).(*caller)
		if c == nil {
			return control.Caller{Actor: "http"}
		}
		out := control.Caller{Actor: "http remote=" + c.remote, Fields: []any{"remote", c.remote}}
		if c.accessor != "" {
			out.Actor = "http accessor=" + c.accessor + " remote=" + c.remote
			out.Fields = append(out.Fields, "accessor", c.accessor)
		}
		return out
	})
	base, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.handleStatus)
	mux.HandleFunc("GET /v1/events", s.handleEvents)
	mux.HandleFunc("GET /v1/services", s.handleServices)
	mux.HandleFunc("GET /v1/logs/{service}", s.serviceGuard(ServiceRead, s.control.Logs))
	mux.HandleFunc("POST /v1/restart/{service}", s.serviceGuard(ServiceWrite, s.control.Restart))
	mux.HandleFunc("POST /v1/reset/{service}", s.serviceGuard(ServiceWrite, s.control.Reset))
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	// Which build answers (an upgrade in place changes it, not the PID).
	// The upgrade itself is the control socket's only: it replaces the
	// node's binary, an act of the machine's operator.
	mux.HandleFunc("GET /v1/version", s.handleVersion)
	if cfg.Volumes != nil {
		mux.Handle("/v1/volumes/", s.volumeGuard(cfg.Volumes))
	}
	s.srv = &http.Server{
		Handler:           s.nodeGuard(mux),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		// Cancelled by Close, so followers end and Shutdown need not wait.
		BaseContext: func(net.Listener) context.Context { return base },
		ErrorLog:    log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	log.Info("HTTP API listening", "address", ln.Addr().String())
	return s, nil
}

// NodeHeader is the header with which a client says which node's API it
// means to reach (mariposa logs -node N, restart, reset): a mariposa of
// another node answers 421 and does nothing, so a URL that resolves
// elsewhere than the node (a loopback address read from the catalog on
// another machine) can never act on the wrong node.
const NodeHeader = control.NodeHeader

// nodeGuard refuses a request meant for another node (NodeHeader).
func (s *Server) nodeGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want := r.Header.Get(NodeHeader); want != "" {
			node, ok := s.node(w)
			if !ok {
				return
			}
			if want != node {
				// Without naming this node: the refusal comes before any
				// token is checked.
				writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("this is not node %q's mariposa", want))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Addr is the address the server listens on (with the port it got).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve answers requests until Close; it returns nil after Close.
func (s *Server) Serve() error {
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving and ends every stream. Safe to call twice.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.srv.Close()
		}
		s.ln.Close()
	})
	return nil
}

type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

// authorize asks whether the request's token has perms; on a refusal it
// answers the request and returns ok false. The first permission is the
// one the request needs; the others (service:read on each service it
// would show) only filter what it shows.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, perms []Perm) (d Decision, r2 *http.Request, ok bool) {
	c := &caller{remote: r.RemoteAddr}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	if s.cfg.Auth == nil {
		d = Decision{ACLDisabled: true, Allowed: make([]bool, len(perms))}
		for i := range d.Allowed {
			d.Allowed[i] = true
		}
		return d, r, true
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	d, err := s.cfg.Auth.Authorize(ctx, RequestToken(r), perms)
	switch {
	case errors.Is(err, ErrNoToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="mariposa"`)
		writeError(w, http.StatusUnauthorized, err.Error())
		return d, r, false
	case errors.Is(err, ErrTokenNotFound):
		s.log.Warn("request refused: unknown token", "path", r.URL.Path, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, "ACL not found: Consul does not know this token")
		return d, r, false
	case err != nil:
		s.log.Warn("request refused: Consul cannot check its token", "path", r.URL.Path, "error", err)
		writeError(w, http.StatusServiceUnavailable, "cannot check the token with Consul: "+err.Error())
		return d, r, false
	case len(d.Allowed) == 0 || !d.Allowed[0]:
		s.log.Warn("request refused: permission denied", "path", r.URL.Path, "remote", r.RemoteAddr, "accessor", d.Accessor, "needs", perms[0].String())
		writeError(w, http.StatusForbidden, fmt.Sprintf("Permission denied: token with AccessorID %q lacks %s", d.Accessor, perms[0]))
		return d, r, false
	}
	c.accessor = d.Accessor
	return d, r, true
}

// node is this node's name, or a 503 while it is not known yet.
func (s *Server) node(w http.ResponseWriter) (string, bool) {
	n := s.cfg.Node()
	if n == "" {
		writeError(w, http.StatusServiceUnavailable, "mariposa is starting: the node's name is not known yet")
	}
	return n, n != ""
}

// serviceName is the service of an instance key ("<service>" or
// "<service>/<k>" for an instance in a slot).
func serviceName(key string) string {
	name, _, _ := strings.Cut(key, "/")
	return name
}

// serviceGuard checks perm on the path's service, and that it runs here,
// before h (a control handler).
func (s *Server) serviceGuard(perm func(string) Perm, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("service")
		d, r, ok := s.authorize(w, r, []Perm{perm(serviceName(key))})
		if !ok {
			return
		}
		// The control handler's 404 names every service of the node: this
		// one names none the token may not read (with ACLs, only the
		// instances of the unit the token may read).
		services := s.cfg.Target.Services()
		if !d.ACLDisabled {
			services = slices.DeleteFunc(slices.Clone(services), func(n string) bool { return serviceName(n) != serviceName(key) })
		}
		inst, msg, found := control.Resolve(key, services)
		if !found {
			if len(services) == 0 {
				msg = fmt.Sprintf("no service %q on this node", key) // none the token may read to name
			}
			writeError(w, http.StatusNotFound, msg)
			return
		}
		r.SetPathValue("service", inst)
		h(w, r)
	}
}

// volumeGuard authorizes service:read on the unit a volume request names
// (/v1/volumes/<unit>/...), then lets h check the slot.
func (s *Server) volumeGuard(h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		unit, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/volumes/"), "/")
		_, r, ok := s.authorize(w, r, []Perm{ServiceRead(unit)})
		if !ok {
			return
		}
		h.ServeHTTP(w, r)
	}
}

// readable authorizes node:read on this node plus service:read on each of
// names, and returns the names the token may read.
func (s *Server) readable(w http.ResponseWriter, r *http.Request, names []string) (map[string]bool, *http.Request, bool) {
	node, ok := s.node(w)
	if !ok {
		return nil, r, false
	}
	perms := []Perm{NodeRead(node)}
	for _, n := range names {
		perms = append(perms, ServiceRead(n))
	}
	d, r, ok := s.authorize(w, r, perms)
	if !ok {
		return nil, r, false
	}
	out := map[string]bool{}
	for i, n := range names {
		if d.Allowed[i+1] {
			out[n] = true
		}
	}
	return out, r, true
}

func serviceNames(snaps []supervisor.Snapshot, events []supervisor.Event) []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, sn := range snaps {
		add(sn.Service)
	}
	for _, e := range events {
		add(e.Service)
	}
	slices.Sort(out)
	return out
}

// Status is GET /v1/status: what this node runs.
type Status struct {
	Node      string     `json:"node"`
	Instances []Instance `json:"instances"` // never null
	// Warnings are what the operator should know about this node's
	// mariposa: the API open to its network without ACLs.
	Warnings []string `json:"warnings,omitempty"`
}

// Instance is one instance's state, as mariposa status shows it.
type Instance struct {
	Service       string    `json:"service"`
	ServiceID     string    `json:"service_id"`
	Slot          string    `json:"slot,omitempty"` // "<unit>/<k>" for an instance in a count slot
	State         string    `json:"state"`
	ChecksPassing bool      `json:"checks_passing"` // every check of the service passing, as this node last saw
	Version       string    `json:"version,omitempty"`
	Leader        string    `json:"leader,omitempty"` // leader | follower | ""
	Term          uint64    `json:"term_index,omitempty"`
	Since         time.Time `json:"since,omitzero"`
	Until         time.Time `json:"until,omitzero"`
	PID           int       `json:"pid,omitempty"`
	Restarts      int       `json:"restarts"`
	LastExit      string    `json:"last_exit,omitempty"`
	Stderr        string    `json:"stderr,omitempty"` // the child's last line on stderr (as in its supervisor check)
	Detail        string    `json:"detail"`           // the human reason
}

func instanceOf(sn supervisor.Snapshot) Instance {
	rep := sn.Report
	return Instance{Service: sn.Service, ServiceID: sn.ServiceID, Slot: sn.Slot, State: string(sn.State),
		ChecksPassing: sn.ChecksPassing, Version: rep.Version, Leader: rep.Role, Term: rep.Term,
		Since: rep.Since, Until: rep.Until, PID: sn.PID, Restarts: sn.Restarts, LastExit: rep.LastExit,
		Stderr: rep.Stderr, Detail: sn.Output}
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	snaps := s.cfg.Snapshots()
	may, _, ok := s.readable(w, r, serviceNames(snaps, nil))
	if !ok {
		return
	}
	out := Status{Node: s.cfg.Node(), Instances: []Instance{}}
	if s.cfg.Warnings != nil {
		out.Warnings = s.cfg.Warnings()
	}
	for _, sn := range snaps {
		if may[sn.Service] {
			out.Instances = append(out.Instances, instanceOf(sn))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleVersion is GET /v1/version: which build answers (node:read).
func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	if _, r, ok := s.readable(w, r, nil); ok {
		s.control.Version(w, r)
	}
}

func (s *Server) handleServices(w http.ResponseWriter, r *http.Request) {
	keys := s.cfg.Target.Services()
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		names = append(names, serviceName(k))
	}
	slices.Sort(names)
	may, _, ok := s.readable(w, r, slices.Compact(names))
	if !ok {
		return
	}
	out := []string{}
	for _, k := range keys {
		if may[serviceName(k)] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	writeJSON(w, http.StatusOK, out)
}

// DefaultEventLines is how many events GET /v1/events returns without n.
const DefaultEventLines = 100

// EventLine is one line of GET /v1/events?follow=1 that is not an event:
// that many events were lost there because the reader fell behind.
type EventLine struct {
	Dropped int64 `json:"dropped"`
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	follow, n, err := control.ParseTail(q, DefaultEventLines)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	only := q.Get("service")
	match := func(e supervisor.Event) bool { return only == "" || e.Service == only }

	if !follow {
		var events []supervisor.Event
		for _, e := range s.cfg.Events.Last(-1) {
			if match(e) {
				events = append(events, e)
			}
		}
		may, _, ok := s.readable(w, r, serviceNames(nil, events))
		if !ok {
			return
		}
		out := []supervisor.Event{}
		for _, e := range events {
			if may[e.Service] {
				out = append(out, e)
			}
		}
		if len(out) > n {
			out = out[len(out)-n:]
		}
		writeJSON(w, http.StatusOK, out)
		return
	}

	all, f := s.cfg.Events.Follow(r.Context(), -1)
	defer f.Close()
	var backlog []supervisor.Event
	for _, e := range all {
		if match(e) {
			backlog = append(backlog, e)
		}
	}
	may, r, ok := s.readable(w, r, serviceNames(nil, backlog))
	if !ok {
		return
	}
	node := s.cfg.Node()
	token := RequestToken(r)
	// Each new event is checked again (the answers are cached), so a
	// token revoked while it follows stops seeing events once Consul says so.
	allowed := func(svc string) (bool, bool) {
		if s.cfg.Auth == nil {
			return true, true
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		d, err := s.cfg.Auth.Authorize(ctx, token, []Perm{NodeRead(node), ServiceRead(svc)})
		if err != nil || !d.Allowed[0] {
			return false, false
		}
		return d.Allowed[1], true
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	var shown []supervisor.Event
	for _, e := range backlog {
		if may[e.Service] {
			shown = append(shown, e)
		}
	}
	if len(shown) > n {
		shown = shown[len(shown)-n:]
	}
	for _, e := range shown {
		if enc.Encode(e) != nil {
			return
		}
	}
	if rc.Flush() != nil {
		return
	}
	for e := range f.C() {
		if d := f.TakeDropped(); d > 0 {
			if enc.Encode(EventLine{Dropped: d}) != nil {
				return
			}
		}
		if !match(e) {
			continue
		}
		ok, still := allowed(e.Service)
		if !still {
			return // the token lost node:read, or Consul cannot say
		}
		if !ok {
			continue
		}
		if enc.Encode(e) != nil || rc.Flush() != nil {
			return
		}
	}
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	node, ok := s.node(w)
	if !ok {
		return
	}
	if _, r, ok = s.authorize(w, r, []Perm{AgentRead(node)}); !ok {
		return
	}
	if s.cfg.Metrics == nil {
		writeError(w, http.StatusNotFound, "no metrics")
		return
	}
	s.cfg.Metrics.ServeHTTP(w, r)
}
