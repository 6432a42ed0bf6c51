package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeConsul answers the two ACL endpoints as Consul does (checked against
// a real agent: see the integration test), from a table of tokens.
type fakeConsul struct {
	aclOff   bool
	down     atomic.Bool
	mu       sync.Mutex
	tokens   map[string]fakeToken // secret -> token
	requests int
	headers  []http.Header
}

type fakeToken struct {
	accessor string
	allow    map[Perm]bool
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.down.Load() {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "rpc error: No cluster leader")
		return
	}
	f.mu.Lock()
	f.requests++
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	if f.aclOff {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "ACL support disabled")
		return
	}
	secret := r.Header.Get("X-Consul-Token")
	switch r.URL.Path {
	case "/v1/acl/token/self":
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		tok, ok := f.tokens[secret]
		if !ok {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, "token does not exist: ACL not found")
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"AccessorID": tok.accessor, "SecretID": secret})
	case "/v1/internal/acl/authorize":
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var reqs []Perm
		if err := json.NewDecoder(r.Body).Decode(&reqs); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if len(reqs) == 0 {
			fmt.Fprint(w, "[]")
			return
		}
		tok, ok := f.tokens[secret]
		if !ok {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, "ACL not found")
			return
		}
		type resp struct {
			Perm
			Allow bool
		}
		var out []resp
		for _, p := range reqs {
			out = append(out, resp{p, tok.allow[p]})
		}
		_ = json.NewEncoder(w).Encode(out)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *fakeConsul) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

func newFake(t *testing.T, f *fakeConsul) (*Authorizer, *time.Time) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	a := NewAuthorizer(&ConsulChecker{BaseURL: srv.URL, Client: srv.Client()}, 30*time.Second, 0)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	return a, &now
}

func TestAuthorize(t *testing.T) {
	const reader, writer = "secret-reader", "secret-writer"
	f := &fakeConsul{tokens: map[string]fakeToken{
		reader: {accessor: "acc-reader", allow: map[Perm]bool{ServiceRead("web"): true, NodeRead("n1"): true}},
		writer: {accessor: "acc-writer", allow: map[Perm]bool{ServiceRead("web"): true, ServiceWrite("web"): true, AgentRead("n1"): true}},
	}}
	a, now := newFake(t, f)
	ctx := context.Background()

	// No token, ACLs on: refused.
	if _, err := a.Authorize(ctx, "", []Perm{ServiceRead("web")}); !errors.Is(err, ErrNoToken) {
		t.Fatalf("no token: %v", err)
	}
	// An unknown token: refused, and remembered.
	if _, err := a.Authorize(ctx, "nope", []Perm{ServiceRead("web")}); !errors.Is(err, ErrTokenNotFound) {
		t.Fatalf("unknown token: %v", err)
	}
	d, err := a.Authorize(ctx, reader, []Perm{ServiceRead("web"), ServiceWrite("web"), NodeRead("n1"), ServiceRead("db")})
	if err != nil {
		t.Fatal(err)
	}
	if d.Accessor != "acc-reader" || d.ACLDisabled || fmt.Sprint(d.Allowed) != "[true false true false]" || d.All() {
		t.Fatalf("reader: %+v", d)
	}
	d, err = a.Authorize(ctx, writer, []Perm{ServiceWrite("web"), AgentRead("n1")})
	if err != nil || !d.All() || d.Accessor != "acc-writer" {
		t.Fatalf("writer: %+v %v", d, err)
	}

	// Cached: the same questions within the TTL ask Consul nothing.
	before := f.count()
	for range 5 {
		if _, err := a.Authorize(ctx, reader, []Perm{ServiceRead("web"), NodeRead("n1")}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authorize(ctx, "nope", []Perm{ServiceRead("web")}); !errors.Is(err, ErrTokenNotFound) {
			t.Fatal(err)
		}
		if _, err := a.Authorize(ctx, "", nil); !errors.Is(err, ErrNoToken) {
			t.Fatal(err)
		}
	}
	if n := f.count() - before; n != 0 {
		t.Errorf("%d requests to Consul for cached answers", n)
	}
	// A new permission of a known token: one request.
	if _, err := a.Authorize(ctx, reader, []Perm{ServiceRead("web"), ServiceRead("api")}); err != nil {
		t.Fatal(err)
	}
	if n := f.count() - before; n != 1 {
		t.Errorf("%d requests for one new permission, want 1", n)
	}

	// After the TTL Consul is asked again: a revoked permission is seen.
	f.mu.Lock()
	f.tokens[reader] = fakeToken{accessor: "acc-reader", allow: map[Perm]bool{NodeRead("n1"): true}}
	f.mu.Unlock()
	*now = now.Add(31 * time.Second)
	d, err = a.Authorize(ctx, reader, []Perm{ServiceRead("web")})
	if err != nil || d.All() {
		t.Errorf("after the TTL, revoked: %+v %v", d, err)
	}

	// The token goes to Consul only in X-Consul-Token, and a request
	// without one carries none (never anyone else's).
	f.mu.Lock()
	for _, h := range f.headers {
		if tok := h.Get("X-Consul-Token"); tok != "" && tok != reader && tok != writer && tok != "nope" {
			t.Errorf("unexpected token sent: %q", tok)
		}
		if h.Get("Authorization") != "" {
			t.Error("an Authorization header went to Consul")
		}
	}
	f.mu.Unlock()

	// Consul cannot answer: its last answers stand, however old (its own
	// extend-cache down policy); what it never answered is refused, never
	// let through.
	f.down.Store(true)
	*now = now.Add(time.Hour)
	if d, err := a.Authorize(ctx, writer, []Perm{ServiceWrite("web"), AgentRead("n1")}); err != nil || !d.All() {
		t.Errorf("Consul down, a known token: %+v %v", d, err)
	}
	if d, err := a.Authorize(ctx, reader, []Perm{ServiceRead("web"), NodeRead("n1")}); err != nil || fmt.Sprint(d.Allowed) != "[false true]" {
		t.Errorf("Consul down, the reader's last answers: %+v %v", d, err)
	}
	if _, err := a.Authorize(ctx, writer, []Perm{ServiceWrite("db")}); err == nil {
		t.Error("Consul down: a permission never answered was allowed")
	}
	if _, err := a.Authorize(ctx, "never-seen", []Perm{ServiceRead("web")}); err == nil || errors.Is(err, ErrTokenNotFound) {
		t.Errorf("Consul down, a token never seen: %v", err)
	}
	if _, err := a.Authorize(ctx, "nope", nil); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("Consul down, a token Consul did not know: %v", err)
	}
	if _, err := a.Authorize(ctx, "", nil); !errors.Is(err, ErrNoToken) {
		t.Errorf("Consul down, no token: %v", err)
	}
	f.down.Store(false)
	if d, err := a.Authorize(ctx, writer, []Perm{ServiceWrite("web"), ServiceWrite("db")}); err != nil || fmt.Sprint(d.Allowed) != "[true false]" {
		t.Errorf("Consul back: %+v %v", d, err)
	}
}

// A fresh Authorizer whose Consul cannot answer refuses everything, and
// one that knew ACLs were off goes on letting everything through.
func TestAuthorizeConsulDown(t *testing.T) {
	f := &fakeConsul{tokens: map[string]fakeToken{}}
	f.down.Store(true)
	a, _ := newFake(t, f)
	ctx := context.Background()
	for _, tok := range []string{"", "t"} {
		if _, err := a.Authorize(ctx, tok, []Perm{ServiceRead("web")}); err == nil || errors.Is(err, ErrNoToken) || errors.Is(err, ErrTokenNotFound) {
			t.Errorf("token %q, nothing known: %v", tok, err)
		}
	}
	off := &fakeConsul{aclOff: true}
	a, now := newFake(t, off)
	if _, err := a.Authorize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	off.down.Store(true)
	*now = now.Add(time.Hour)
	for _, tok := range []string{"", "t"} {
		if d, err := a.Authorize(ctx, tok, []Perm{ServiceWrite("web")}); err != nil || !d.All() {
			t.Errorf("token %q, ACLs off when last known: %+v %v", tok, d, err)
		}
	}
}

func TestAuthorizeACLDisabled(t *testing.T) {
	f := &fakeConsul{aclOff: true}
	a, now := newFake(t, f)
	ctx := context.Background()
	for _, tok := range []string{"", "whatever"} {
		d, err := a.Authorize(ctx, tok, []Perm{ServiceWrite("web"), AgentRead("n1")})
		if err != nil || !d.ACLDisabled || !d.All() {
			t.Fatalf("token %q without ACLs: %+v %v", tok, d, err)
		}
	}
	n := f.count()
	if _, err := a.Authorize(ctx, "other", []Perm{ServiceRead("x")}); err != nil {
		t.Fatal(err)
	}
	if f.count() != n {
		t.Error("Consul asked again within the TTL")
	}
	*now = now.Add(time.Minute)
	if _, err := a.Authorize(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if f.count() != n+1 {
		t.Error("Consul not asked again after the TTL")
	}
}

// More than 64 permissions go in batches; the cache stays under its bound.
func TestAuthorizeBatchesAndBound(t *testing.T) {
	allow := map[Perm]bool{}
	var perms []Perm
	for i := range 150 {
		p := ServiceRead(fmt.Sprintf("svc-%d", i))
		perms = append(perms, p)
		allow[p] = i%2 == 0
	}
	f := &fakeConsul{tokens: map[string]fakeToken{"t": {accessor: "a", allow: allow}}}
	a, _ := newFake(t, f)
	a.max = 100
	d, err := a.Authorize(context.Background(), "t", perms)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range d.Allowed {
		if ok != (i%2 == 0) {
			t.Fatalf("perm %d: %v", i, ok)
		}
	}
	if f.count() != 1+3 { // token self, then 64+64+22
		t.Errorf("%d requests, want 4", f.count())
	}
	if n := a.cached(); n > 100 {
		t.Errorf("%d answers cached, over the bound of 100", n)
	}
	// Many tokens: still bounded.
	for i := range 300 {
		_, _ = a.Authorize(context.Background(), fmt.Sprintf("unknown-%d", i), nil)
	}
	if n := a.cached(); n > 100 {
		t.Errorf("%d answers cached, over the bound of 100", n)
	}
}

func TestRequestToken(t *testing.T) {
	for _, c := range []struct {
		h    map[string]string
		want string
	}{
		{map[string]string{"X-Consul-Token": "a"}, "a"},
		{map[string]string{"Authorization": "Bearer b"}, "b"},
		{map[string]string{"Authorization": "bearer  c "}, "c"},
		{map[string]string{"Authorization": "Basic d"}, ""},
		{map[string]string{"X-Consul-Token": "e", "Authorization": "Bearer f"}, "e"},
		{nil, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range c.h {
			r.Header.Set(k, v)
		}
		if got := RequestToken(r); got != c.want {
			t.Errorf("%v: %q, want %q", c.h, got, c.want)
		}
	}
}
