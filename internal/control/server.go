package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/logring"
)

// Target is what the control channel acts on: the supervisor of this node.
type Target interface {
	// Restart restarts the running process now, outside the restart
	// policy, or starts a failed or completed one. by names who asked
	// (Caller.Actor), for the supervisor's events and the audit file.
	Restart(service, by string) error
	// ResetFailed clears a failed service's restart history and starts it
	// again (systemd's reset-failed + start). by as for Restart.
	ResetFailed(service, by string) error
	// Services lists the services of this node, for errors and completion.
	Services() []string
}

// ErrNoService is what a Target's error wraps when the service is not
// (or no longer) on this node: the API answers 404.
var ErrNoService = errors.New("no such service")

// Handlers answer the control API's requests. The UNIX socket's Server
// serves them, and so does the node's HTTP API (nodeapi), behind
// its own authorization: the routes' wildcard is {service}.
type Handlers struct {
	target Target
	logs   *logring.Set
	log    hclog.Logger
	// who names the caller of a request.
	who func(*http.Request) Caller
}

// Caller is who made a request: Actor goes with the operator actions to
// the supervisor (its events, so the audit file and /v1/events, say who
// asked), Fields to the log lines of the request. Neither ever holds a
// token.
type Caller struct {
	Actor  string
	Fields []any
}

// NewHandlers returns the handlers of t and logs; who names a request's
// caller (nil: nobody named).
func NewHandlers(t Target, logs *logring.Set, log hclog.Logger, who func(*http.Request) Caller) *Handlers {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if who == nil {
		who = func(*http.Request) Caller { return Caller{} }
	}
	return &Handlers{target: t, logs: logs, log: log, who: who}
}

// Restart is POST /v1/restart/{service}.
func (h *Handlers) Restart(w http.ResponseWriter, r *http.Request) {
	h.action("restart", h.target.Restart)(w, r)
}

// Reset is POST /v1/reset/{service}.
func (h *Handlers) Reset(w http.ResponseWriter, r *http.Request) {
	h.action("reset", h.target.ResetFailed)(w, r)
}

// Logs is GET /v1/logs/{service}.
func (h *Handlers) Logs(w http.ResponseWriter, r *http.Request) { h.handleLogs(w, r) }

// Services is GET /v1/services.
func (h *Handlers) Services(w http.ResponseWriter, r *http.Request) { h.handleServices(w, r) }

// Server serves the control API on a UNIX socket.
type Server struct {
	*Handlers
	path string
	log  hclog.Logger

	ln     *net.UnixListener
	lock   *os.File
	id     fileID
	hasID  bool
	srv    *http.Server
	cancel context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

// Listen creates the socket at path (see ResolvePath) and returns the
// server, not yet serving: call Serve, and Close on shutdown. It fails with
// an error naming the path when another mariposa answers there, or when
// the path is unusable; a stale socket left by a dead mariposa is replaced.
func Listen(path string, t Target, logs *logring.Set, log hclog.Logger) (*Server, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if t == nil || logs == nil {
		return nil, errors.New("control: Listen needs a Target and a logring.Set")
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("control")
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	lock, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	stale, err := checkStale(path)
	if err != nil {
		lock.Close()
		return nil, err
	}
	if stale {
		log.Info("replacing a stale control socket", "path", path)
	}
	ln, err := listen(path, stale)
	if err != nil {
		lock.Close()
		return nil, err
	}
	h := NewHandlers(t, logs, log, func(r *http.Request) Caller {
		p := peerOf(r)
		return Caller{Actor: fmt.Sprintf("socket uid=%d pid=%d", p.uid, p.pid), Fields: []any{"uid", p.uid, "pid", p.pid}}
	})
	s := &Server{Handlers: h, path: path, log: log, ln: ln, lock: lock}
	s.id, s.hasID = idOf(path)
	base, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/restart/{service}", h.Restart)
	mux.HandleFunc("POST /v1/reset/{service}", h.Reset)
	mux.HandleFunc("GET /v1/logs/{service}", h.Logs)
	mux.HandleFunc("GET /v1/services", h.Services)
	mux.HandleFunc("GET /v1/version", h.Version)
	mux.HandleFunc("POST /v1/upgrade", h.Upgrade)
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// Cancelled by Close, so followers end and Shutdown need not wait.
		BaseContext: func(net.Listener) context.Context { return base },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*peerConn); ok {
				return context.WithValue(ctx, peerKey{}, pc.peer)
			}
			return ctx
		},
		ErrorLog: log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	log.Info("control socket listening", "path", path)
	return s, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve answers requests until Close; it returns nil after Close.
func (s *Server) Serve() error {
	err := s.srv.Serve(&peerListener{UnixListener: s.ln, log: s.log})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving, ends followers, removes the socket (if it is still
// the one this server created) and releases the lock. Safe to call twice.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.srv.Close()
		}
		s.ln.Close() // Shutdown closes it only if Serve ran
		if id, ok := idOf(s.path); ok && s.hasID && id == s.id {
			if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.closeErr = err
			}
		}
		s.lock.Close()
	})
	return s.closeErr
}

// Serve listens on path and serves until ctx ends, then closes.
func Serve(ctx context.Context, path string, t Target, logs *logring.Set, log hclog.Logger) error {
	s, err := Listen(path, t, logs, log)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	err = s.Serve()
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// peer is the caller, from SO_PEERCRED.
type peer struct {
	uid, gid uint32
	pid      int32
}

type peerKey struct{}

func peerOf(r *http.Request) peer {
	p, _ := r.Context().Value(peerKey{}).(peer)
	return p
}

type peerConn struct {
	*net.UnixConn
	peer peer
}

// peerListener reads each caller's credentials and turns away every user
// but this process's own and root: the socket's mode says so already, this
// holds even where the mode cannot (a socket bound in place, a shared dir).
type peerListener struct {
	*net.UnixListener
	log hclog.Logger
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		p, err := credentials(c)
		if err != nil {
			l.log.Warn("control connection refused: cannot read its credentials", "error", err)
			c.Close()
			continue
		}
		if int(p.uid) != os.Geteuid() && p.uid != 0 {
			l.log.Warn("control connection refused: another user", "uid", p.uid, "pid", p.pid)
			c.Close()
			continue
		}
		return &peerConn{UnixConn: c, peer: p}, nil
	}
}

// Response is the body of a successful restart or reset.
type Response struct {
	Service string `json:"service"`
	Action  string `json:"action"`
}

// errorBody is the body of every error.
type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

// known finds the instance name means on this node (see Resolve); else
// the 404 message names the ones that are.
func (s *Handlers) known(name string) (string, string, bool) {
	return Resolve(name, s.target.Services())
}

// Resolve finds the instance on a node whose instances are services that
// name means: the name itself ("web", "api/0"), or a unit's name when the
// node holds exactly one slot of it ("api" for "api/0"), as journalctl -u
// and nomad alloc logs need no index. Else msg says why, naming what the
// node has.
func Resolve(name string, services []string) (key, msg string, ok bool) {
	names := append([]string(nil), services...)
	sort.Strings(names)
	var slots []string
	for _, n := range names {
		if n == name {
			return n, "", true
		}
		if unit, _, cut := strings.Cut(n, "/"); cut && unit == name {
			slots = append(slots, n)
		}
	}
	switch len(slots) {
	case 0:
		return "", noServiceMsg(name, names), false
	case 1:
		return slots[0], "", true
	}
	return "", fmt.Sprintf("this node holds %d slots of %q: name one (%s)", len(slots), name, strings.Join(slots, ", ")), false
}

func noServiceMsg(name string, names []string) string {
	list := "none"
	if len(names) > 0 {
		list = strings.Join(names, ", ")
	}
	return fmt.Sprintf("no service %q on this node (services: %s)", name, list)
}

func (s *Handlers) audit(r *http.Request, action, service string) (hclog.Logger, Caller) {
	c := s.who(r)
	return s.log.With(append([]any{"action", action, "service", service}, c.Fields...)...), c
}

func (s *Handlers) action(name string, do func(service, by string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		svc, msg, ok := s.known(r.PathValue("service"))
		if !ok {
			lg, _ := s.audit(r, name, r.PathValue("service"))
			lg.Warn("control request refused", "error", msg)
			writeError(w, http.StatusNotFound, msg)
			return
		}
		lg, c := s.audit(r, name, svc)
		if err := do(svc, c.Actor); err != nil {
			code := http.StatusConflict
			msg := err.Error()
			if errors.Is(err, ErrNoService) {
				code = http.StatusNotFound
				if _, m, _ := s.known(svc); m != "" {
					msg = m
				}
			}
			lg.Warn("control request failed", "error", msg)
			writeError(w, code, msg)
			return
		}
		lg.Info("control request done")
		writeJSON(w, http.StatusOK, Response{Service: svc, Action: name})
	}
}

func (s *Handlers) handleServices(w http.ResponseWriter, r *http.Request) {
	names := append([]string{}, s.target.Services()...)
	sort.Strings(names)
	writeJSON(w, http.StatusOK, names)
}

// LogEntry is one line of GET /v1/logs as JSON. A entry with Dropped > 0
// and no Stream says that many lines were dropped there because the reader
// fell behind.
type LogEntry struct {
	Time    time.Time `json:"time,omitzero"`
	Stream  string    `json:"stream,omitempty"`
	Text    string    `json:"text,omitempty"`
	Dropped int64     `json:"dropped,omitempty"`
}

// ParseTail reads the query parameters of a tail (logs, events): follow
// (a boolean, default false) and n, the lines to give first (a number >= 0,
// default def). The error names the parameter and what it wants.
func ParseTail(q url.Values, def int) (follow bool, n int, err error) {
	if v := q.Get("follow"); v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			return false, 0, fmt.Errorf("follow=%q: want 1 or 0", v)
		}
	}
	n = def
	if v := q.Get("n"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 {
			return false, 0, fmt.Errorf("n=%q: want a number >= 0", v)
		}
		n = i
	}
	return follow, n, nil
}

// DefaultLines is how many lines GET /v1/logs returns without n.
const DefaultLines = 100

func (s *Handlers) handleLogs(w http.ResponseWriter, r *http.Request) {
	svc := r.PathValue("service")
	q := r.URL.Query()
	follow, n, err := ParseTail(q, DefaultLines)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	text := false
	switch f := q.Get("format"); f {
	case "", "json":
	case "text":
		text = true
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("format=%q: want json or text", f))
		return
	}
	action := "logs"
	if follow {
		action = "logs-follow"
	}
	key, msg, ok := s.known(svc)
	lg, _ := s.audit(r, action, svc)
	if !ok {
		lg.Warn("control request refused", "error", msg)
		writeError(w, http.StatusNotFound, msg)
		return
	}
	svc = key
	lg.Info("control request")

	if text {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("Cache-Control", "no-store")
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	write := func(e LogEntry) error {
		if !text {
			return enc.Encode(e)
		}
		if e.Stream == "" {
			_, err := fmt.Fprintf(bw, "-- %d lines dropped --\n", e.Dropped)
			return err
		}
		if e.Dropped > 0 {
			if _, err := fmt.Fprintf(bw, "-- %d lines dropped --\n", e.Dropped); err != nil {
				return err
			}
		}
		_, err := fmt.Fprintf(bw, "%s %s %s\n", e.Time.UTC().Format(time.RFC3339Nano), e.Stream, e.Text)
		return err
	}
	ring := s.logs.Get(svc)
	if !follow {
		for _, l := range ring.Last(n) {
			if write(LogEntry{Time: l.Time, Stream: l.Stream, Text: l.Text}) != nil {
				return
			}
		}
		_ = bw.Flush()
		return
	}

	backlog, f := ring.Follow(r.Context(), n, 0)
	defer f.Close()
	flush := func() bool {
		if bw.Flush() != nil {
			return false
		}
		http.NewResponseController(w).Flush()
		return true
	}
	for _, l := range backlog {
		if write(LogEntry{Time: l.Time, Stream: l.Stream, Text: l.Text}) != nil {
			return
		}
	}
	if !flush() {
		return
	}
	for e := range f.C() {
		if write(LogEntry{Time: e.Time, Stream: e.Stream, Text: e.Text, Dropped: e.Dropped}) != nil {
			return
		}
		// Flush when caught up, not on every line of a burst.
		if len(f.C()) == 0 && !flush() {
			return
		}
	}
	// The ring was closed (service removed) or the caller left.
	if d := f.Dropped(); d > 0 && r.Context().Err() == nil {
		_ = write(LogEntry{Dropped: d})
		flush()
	}
}
