package nodeapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/internal/logring"
	"github.com/mariposa-sh/mariposa/supervisor"
)

type fakeTarget struct {
	mu       sync.Mutex
	services []string
	done     []string
	by       []string
}

func (f *fakeTarget) Restart(s, by string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = append(f.done, "restart "+s)
	f.by = append(f.by, by)
	return nil
}

func (f *fakeTarget) ResetFailed(s, by string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = append(f.done, "reset "+s)
	f.by = append(f.by, by)
	return nil
}

func (f *fakeTarget) Services() []string { return f.services }

// calls is what was done and who asked.
func (f *fakeTarget) calls() (done, by []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.done), slices.Clone(f.by)
}

// memChecker is a Checker from a table: token -> allowed permissions.
type memChecker struct {
	off    bool
	tokens map[string][]Perm
}

func (m *memChecker) ACLEnabled(context.Context) (bool, error) { return !m.off, nil }

func (m *memChecker) Token(_ context.Context, tok string) (string, error) {
	if m.off {
		return "", ErrACLDisabled
	}
	if _, ok := m.tokens[tok]; !ok {
		return "", ErrTokenNotFound
	}
	return "acc-" + tok, nil
}

func (m *memChecker) Authorize(_ context.Context, tok string, perms []Perm) ([]bool, error) {
	out := make([]bool, len(perms))
	for i, p := range perms {
		out[i] = slices.Contains(m.tokens[tok], p)
	}
	return out, nil
}

type apiFixture struct {
	srv    *Server
	base   string
	events *EventLog
	logs   *logring.Set
	target *fakeTarget
}

func newAPI(t *testing.T, checker Checker) *apiFixture {
	t.Helper()
	fx := &apiFixture{events: NewEventLog(50), logs: logring.NewSet(10, 4096),
		target: &fakeTarget{services: []string{"web", "db", "api/0"}}}
	cfg := Config{Addr: "127.0.0.1:0", Node: func() string { return "n1" },
		Snapshots: func() []supervisor.Snapshot {
			return []supervisor.Snapshot{
				{Service: "web", ServiceID: "web-n1", State: supervisor.StateRunning, PID: 42, Output: "running (pid 42)"},
				{Service: "db", ServiceID: "db-n1", State: supervisor.StateBackoff},
				{Service: "api", ServiceID: "api-0", Slot: "api/0", State: supervisor.StateRunning},
			}
		},
		Events: fx.events, Target: fx.target, Logs: fx.logs,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "mariposa_up 1") }),
	}
	if checker != nil {
		cfg.Auth = NewAuthorizer(checker, time.Minute, 0)
	}
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	t.Cleanup(func() { s.Close() })
	fx.srv, fx.base = s, "http://"+s.Addr()
	return fx
}

func (fx *apiFixture) do(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, fx.base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAPIWithoutACLs(t *testing.T) {
	fx := newAPI(t, &memChecker{off: true})
	code, body := fx.do(t, "GET", "/v1/status", "")
	if code != 200 {
		t.Fatalf("status: %d %s", code, body)
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Node != "n1" || len(st.Instances) != 3 || st.Instances[0].PID != 42 || st.Instances[2].Slot != "api/0" {
		t.Errorf("status: %+v", st)
	}
	code, body = fx.do(t, "POST", "/v1/restart/web", "")
	if code != 200 || !strings.Contains(body, `"action":"restart"`) {
		t.Errorf("restart: %d %s", code, body)
	}
	code, body = fx.do(t, "POST", "/v1/reset/api%2F0", "")
	if code != 200 {
		t.Errorf("reset of a slot instance: %d %s", code, body)
	}
	if got := fmt.Sprint(fx.target.done); got != "[restart web reset api/0]" {
		t.Errorf("done: %s", got)
	}
	// Without ACLs the supervisor is told the caller's address.
	_, actors := fx.target.calls()
	for _, by := range actors {
		if !strings.HasPrefix(by, "http remote=127.0.0.1:") {
			t.Errorf("actor %q, want http remote=127.0.0.1:PORT", by)
		}
	}
	code, body = fx.do(t, "POST", "/v1/restart/nope", "")
	if code != 404 || !strings.Contains(body, "api/0, db, web") {
		t.Errorf("unknown service: %d %s (without ACLs, names the node's services)", code, body)
	}
	if code, _ = fx.do(t, "GET", "/v1/restart/web", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET restart: %d", code)
	}
	if code, body = fx.do(t, "GET", "/metrics", ""); code != 200 || !strings.Contains(body, "mariposa_up") {
		t.Errorf("metrics: %d %s", code, body)
	}
	if code, body = fx.do(t, "GET", "/v1/services", ""); code != 200 || body != `["api/0","db","web"]`+"\n" {
		t.Errorf("services: %d %s", code, body)
	}
}

func TestAPIWithACLs(t *testing.T) {
	fx := newAPI(t, &memChecker{tokens: map[string][]Perm{
		"web-reader": {NodeRead("n1"), ServiceRead("web")},
		"web-writer": {ServiceRead("web"), ServiceWrite("web")},
		"no-node":    {ServiceRead("web"), ServiceRead("db")},
		"prometheus": {AgentRead("n1")},
		"api-reader": {ServiceRead("api")},
	}})
	fx.logs.Get("web").Add(logring.Line{Stream: "stdout", Text: "hello"})
	fx.logs.Get("api/0").Add(logring.Line{Stream: "stdout", Text: "from a slot"})
	for _, c := range []struct {
		method, path, token string
		code                int
		has, hasNot         string
	}{
		{"GET", "/v1/status", "", 401, "token is needed", ""},
		{"GET", "/v1/status", "bogus", 403, "ACL not found", ""},
		{"GET", "/v1/status", "no-node", 403, `node:read on \"n1\"`, ""},
		{"GET", "/v1/status", "web-reader", 200, `"web-n1"`, `"db-n1"`},
		{"GET", "/v1/services", "web-reader", 200, `"web"`, `"db"`},
		{"GET", "/v1/version", "", 401, "token is needed", ""},
		{"GET", "/v1/version", "no-node", 403, `node:read on \"n1\"`, ""},
		{"GET", "/v1/version", "web-reader", 200, `"pid"`, ""},
		{"POST", "/v1/upgrade", "web-writer", 404, "", ""}, // the control socket's only
		{"GET", "/v1/logs/web", "web-reader", 200, "hello", ""},
		{"GET", "/v1/logs/db", "web-reader", 403, `service:read on \"db\"`, ""},
		{"GET", "/v1/logs/api%2F0", "api-reader", 200, "from a slot", ""},
		{"GET", "/v1/logs/api", "api-reader", 200, "from a slot", ""},                                             // the unit's one slot here
		{"GET", "/v1/logs/api%2F7", "api-reader", 404, "api/0", "web"},                                            // names only the unit's instances
		{"GET", "/v1/logs/nope", "web-reader", 403, "nope", "db"},                                                 // no service:read on nope; names no other service
		{"GET", "/v1/logs/web%2F3", "web-reader", 404, `no service \"web/3\" on this node (services: web)`, "db"}, // names only what it may read
		{"POST", "/v1/restart/web", "web-reader", 403, `service:write on \"web\"`, ""},
		{"POST", "/v1/restart/web", "web-writer", 200, "restart", ""},
		{"GET", "/metrics", "web-reader", 403, `agent:read on \"n1\"`, ""},
		{"GET", "/metrics", "prometheus", 200, "mariposa_up", ""},
	} {
		code, body := fx.do(t, c.method, c.path, c.token)
		if code != c.code || !strings.Contains(body, c.has) || (c.hasNot != "" && strings.Contains(body, c.hasNot)) {
			t.Errorf("%s %s (%s): %d %s; want %d with %q, without %q", c.method, c.path, c.token, code, body, c.code, c.has, c.hasNot)
		}
	}
	// The supervisor is told the token's AccessorID, never the token.
	_, actors := fx.target.calls()
	if got := fmt.Sprint(actors); !strings.HasPrefix(got, "[http accessor=acc-web-writer remote=127.0.0.1:") || strings.Contains(got, "accessor=web-writer") {
		t.Errorf("actors %s", got)
	}
	// X-Consul-Token works as well as a bearer token.
	req, _ := http.NewRequest("GET", fx.base+"/v1/status", nil)
	req.Header.Set("X-Consul-Token", "web-reader")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("X-Consul-Token: %d", resp.StatusCode)
	}
}

func TestAPIEvents(t *testing.T) {
	fx := newAPI(t, &memChecker{tokens: map[string][]Perm{"web-reader": {NodeRead("n1"), ServiceRead("web")}}})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		fx.events.Add(supervisor.Event{Time: t0.Add(time.Duration(i) * time.Second), Service: "web", ServiceID: "web-n1", Kind: supervisor.EventStarted, PID: i})
		fx.events.Add(supervisor.Event{Time: t0, Service: "db", ServiceID: "db-n1", Kind: supervisor.EventExited})
	}
	code, body := fx.do(t, "GET", "/v1/events?n=3", "web-reader")
	var evs []supervisor.Event
	if err := json.Unmarshal([]byte(body), &evs); code != 200 || err != nil {
		t.Fatalf("events: %d %s %v", code, body, err)
	}
	if len(evs) != 3 || evs[0].PID != 2 || evs[2].PID != 4 {
		t.Errorf("last 3 web events: %+v", evs)
	}
	for _, e := range evs {
		if e.Service != "web" {
			t.Errorf("an event of a service the token may not read: %+v", e)
		}
	}
	if code, _ := fx.do(t, "GET", "/v1/events", ""); code != 401 {
		t.Errorf("events without a token: %d", code)
	}

	// Follow: the backlog, then each new event as it comes, flushed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fx.base+"/v1/events?follow=1&n=1", nil)
	req.Header.Set("X-Consul-Token", "web-reader")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	rd := bufio.NewScanner(resp.Body)
	next := func() supervisor.Event {
		t.Helper()
		if !rd.Scan() {
			t.Fatalf("the stream ended: %v", rd.Err())
		}
		var e supervisor.Event
		if err := json.Unmarshal(rd.Bytes(), &e); err != nil {
			t.Fatalf("%q: %v", rd.Text(), err)
		}
		return e
	}
	if e := next(); e.PID != 4 {
		t.Errorf("backlog: %+v", e)
	}
	fx.events.Add(supervisor.Event{Service: "db", ServiceID: "db-n1", Kind: supervisor.EventExited}) // not shown
	fx.events.Add(supervisor.Event{Service: "web", ServiceID: "web-n1", Kind: supervisor.EventExited, Reason: "exit 1"})
	if e := next(); e.Kind != supervisor.EventExited || e.Service != "web" {
		t.Errorf("followed: %+v", e)
	}
	// Closing the server ends the stream.
	fx.srv.Close()
	if rd.Scan() {
		t.Errorf("after close: %q", rd.Text())
	}
	if n := fx.events.Followers(); n != 0 {
		t.Errorf("%d followers left", n)
	}
}

// The logs endpoint is the control API's: bounded by the ring, ?n.
func TestAPILogsBounded(t *testing.T) {
	fx := newAPI(t, nil)
	for i := range 30 {
		fx.logs.Get("web").Add(logring.Line{Stream: "stdout", Text: fmt.Sprintf("line %d", i)})
	}
	code, body := fx.do(t, "GET", "/v1/logs/web", "")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if code != 200 || len(lines) != 10 {
		t.Fatalf("logs: %d, %d lines (ring of 10)", code, len(lines))
	}
	var e control.LogEntry
	if err := json.Unmarshal([]byte(lines[9]), &e); err != nil || e.Text != "line 29" {
		t.Errorf("last line: %+v %v", e, err)
	}
	if _, body = fx.do(t, "GET", "/v1/logs/web?n=2&format=text", ""); strings.Count(body, "\n") != 2 {
		t.Errorf("n=2: %q", body)
	}
}

func TestEventLog(t *testing.T) {
	l := NewEventLog(3)
	if got := l.Last(10); len(got) != 0 {
		t.Errorf("empty: %v", got)
	}
	for i := range 5 {
		l.Add(supervisor.Event{PID: i})
	}
	got := l.Last(-1)
	if len(got) != 3 || got[0].PID != 2 || got[2].PID != 4 {
		t.Errorf("ring: %+v", got)
	}
	if got := l.Last(1); len(got) != 1 || got[0].PID != 4 {
		t.Errorf("last 1: %+v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	back, f := l.Follow(ctx, 2)
	if len(back) != 2 || back[1].PID != 4 {
		t.Errorf("backlog: %+v", back)
	}
	for i := range followerBuffer + 10 {
		l.Add(supervisor.Event{PID: 100 + i})
	}
	if d := f.Dropped(); d != 10 {
		t.Errorf("dropped %d, want 10", d)
	}
	if e := <-f.C(); e.PID != 100 {
		t.Errorf("first followed: %+v", e)
	}
	cancel()
	for range f.C() { // closes once the context ends
	}
	f.Close()
	if l.Followers() != 0 {
		t.Error("follower not removed")
	}
	l.Add(supervisor.Event{}) // no follower: never blocks
}

// A request meant for another node (X-Mariposa-Node) is refused before
// anything is done or any token checked, without naming this node; one
// meant for this node goes through.
func TestAPINodeGuard(t *testing.T) {
	fx := newAPI(t, &memChecker{tokens: map[string][]Perm{"web-writer": {ServiceRead("web"), ServiceWrite("web")}}})
	do := func(node, token string) (int, string) {
		req, _ := http.NewRequest("POST", fx.base+"/v1/restart/web", nil)
		req.Header.Set(NodeHeader, node)
		if token != "" {
			req.Header.Set("X-Consul-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("n2", ""); code != http.StatusMisdirectedRequest || !strings.Contains(body, `not node \"n2\"'s mariposa`) || strings.Contains(body, "n1") {
		t.Errorf("another node's request: %d %s", code, body)
	}
	if code, body := do("n2", "web-writer"); code != http.StatusMisdirectedRequest {
		t.Errorf("another node's request with a token: %d %s", code, body)
	}
	if done, _ := fx.target.calls(); len(done) != 0 {
		t.Fatalf("a misdirected request reached the target: %v", done)
	}
	if code, body := do("n1", "web-writer"); code != 200 {
		t.Errorf("this node's request: %d %s", code, body)
	}
	if done, _ := fx.target.calls(); fmt.Sprint(done) != "[restart web]" {
		t.Errorf("done: %v", done)
	}
}
