package nodeapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Perm is one permission a request needs, in Consul's ACL terms: a
// resource (service, node, agent), a segment (its name) and an access
// (read, write).
type Perm struct {
	Resource string
	Segment  string
	Access   string
}

func (p Perm) String() string { return fmt.Sprintf("%s:%s on %q", p.Resource, p.Access, p.Segment) }

// ServiceRead, ServiceWrite, NodeRead and AgentRead are the permissions
// the API asks for.
func ServiceRead(name string) Perm  { return Perm{"service", name, "read"} }
func ServiceWrite(name string) Perm { return Perm{"service", name, "write"} }
func NodeRead(name string) Perm     { return Perm{"node", name, "read"} }
func AgentRead(name string) Perm    { return Perm{"agent", name, "read"} }

// Errors of an authorization. A Checker's other errors mean Consul could
// not answer: the request is refused (503), never let through.
var (
	// ErrACLDisabled: Consul has no ACLs; nothing needs a token.
	ErrACLDisabled = errors.New("ACL support disabled")
	// ErrNoToken: ACLs are on and the request carries no token.
	ErrNoToken = errors.New("a Consul ACL token is needed (X-Consul-Token or Authorization: Bearer)")
	// ErrTokenNotFound: Consul does not know the token.
	ErrTokenNotFound = errors.New("ACL not found")
)

// Checker asks Consul about tokens; ConsulChecker is the real one.
type Checker interface {
	// ACLEnabled says whether Consul enforces ACLs.
	ACLEnabled(ctx context.Context) (bool, error)
	// Token resolves a token: its AccessorID, ErrTokenNotFound, or
	// ErrACLDisabled.
	Token(ctx context.Context, token string) (accessor string, err error)
	// Authorize says, for each of perms, whether token has it (at most
	// 64 at once), or ErrTokenNotFound or ErrACLDisabled.
	Authorize(ctx context.Context, token string, perms []Perm) ([]bool, error)
}

// Authorizer decides what a request's token may do, as Consul would:
// through Consul's own answers about the token (the ACL token self
// endpoint, then /v1/internal/acl/authorize, as consul-template and Nomad
// style tools ask), cached for TTL. The cache is bounded and keyed by a
// SHA-256 of the token; the token itself is never kept, logged or sent
// anywhere but to Consul.
//
// When Consul cannot answer, an answer it gave before stands, however old
// (Consul's own default acl.down_policy, extend-cache): the metrics and
// the node's status stay readable through an outage of the agent by those
// who could read them, and nobody else gets in. A token never seen gets
// nothing until Consul answers.
type Authorizer struct {
	c   Checker
	ttl time.Duration
	max int
	now func() time.Time

	mu     sync.Mutex
	acl    aclState // Consul's last answer about ACLs
	tokens map[[32]byte]tokenEntry
	perms  map[permKey]permEntry
}

// aclState is whether Consul enforces ACLs, as it last said.
type aclState struct {
	known, enabled bool
	until          time.Time
}

type tokenEntry struct {
	accessor string
	notFound bool
	until    time.Time
}

type permKey struct {
	token [32]byte
	perm  Perm
}

type permEntry struct {
	allow bool
	until time.Time
}

// DefaultTTL is how long an answer about a token stays good: Consul's own
// token TTL on client agents (acl.token_ttl) is 30 s.
const DefaultTTL = 30 * time.Second

// DefaultCacheSize bounds the cached answers (tokens and permissions).
const DefaultCacheSize = 4096

// maxAuthorize is how many permissions Consul checks in one request.
const maxAuthorize = 64

// NewAuthorizer caches c's answers for ttl (DefaultTTL if 0), at most max
// of them (DefaultCacheSize if 0).
func NewAuthorizer(c Checker, ttl time.Duration, max int) *Authorizer {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if max <= 0 {
		max = DefaultCacheSize
	}
	return &Authorizer{c: c, ttl: ttl, max: max, now: time.Now,
		tokens: map[[32]byte]tokenEntry{}, perms: map[permKey]permEntry{}}
}

// Decision is what a token may do.
type Decision struct {
	// ACLDisabled: Consul has no ACLs; everything is allowed.
	ACLDisabled bool
	// Accessor is the token's AccessorID (for the log; "" without ACLs).
	Accessor string
	// Allowed says, for each permission asked, whether the token has it.
	Allowed []bool
}

// All says whether every permission asked is allowed.
func (d Decision) All() bool {
	for _, ok := range d.Allowed {
		if !ok {
			return false
		}
	}
	return true
}

// Authorize says what token may do of perms. Its errors: ErrNoToken,
// ErrTokenNotFound, or Consul's failure to answer (with no earlier answer
// to stand for it).
func (a *Authorizer) Authorize(ctx context.Context, token string, perms []Perm) (Decision, error) {
	all := func() Decision {
		d := Decision{ACLDisabled: true, Allowed: make([]bool, len(perms))}
		for i := range d.Allowed {
			d.Allowed[i] = true
		}
		return d
	}
	now := a.now()
	a.mu.Lock()
	acl := a.acl
	a.mu.Unlock()
	if acl.known && !acl.enabled && now.Before(acl.until) {
		return all(), nil
	}
	if token == "" {
		// Consul would answer for a request without a token with the
		// agent's default token: here that is never done; a token is
		// needed once ACLs are on.
		if !acl.known || !now.Before(acl.until) {
			enabled, err := a.c.ACLEnabled(ctx)
			switch {
			case err == nil:
				a.setACL(enabled, now)
				acl.known, acl.enabled = true, enabled
			case !acl.known:
				return Decision{}, err
			}
		}
		if !acl.enabled {
			return all(), nil
		}
		return Decision{}, ErrNoToken
	}
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	te, cached := a.tokens[key]
	a.mu.Unlock()
	if !cached || !now.Before(te.until) {
		accessor, err := a.c.Token(ctx, token)
		switch {
		case errors.Is(err, ErrACLDisabled):
			a.setACL(false, now)
			return all(), nil
		case errors.Is(err, ErrTokenNotFound):
			te = tokenEntry{notFound: true, until: now.Add(a.ttl)}
		case err != nil && acl.known && !acl.enabled:
			return all(), nil // ACLs were off when Consul last said
		case err != nil && cached:
			// te stands: Consul's last answer about this token.
		case err != nil:
			return Decision{}, err
		default:
			te = tokenEntry{accessor: accessor, until: now.Add(a.ttl)}
			a.setACL(true, now)
		}
		a.mu.Lock()
		a.makeRoom()
		a.tokens[key] = te
		a.mu.Unlock()
	}
	if te.notFound {
		return Decision{}, ErrTokenNotFound
	}
	d := Decision{Accessor: te.accessor, Allowed: make([]bool, len(perms))}
	var missing []int
	stale := map[int]bool{} // expired answers, which stand if Consul cannot answer
	a.mu.Lock()
	for i, p := range perms {
		e, ok := a.perms[permKey{key, p}]
		if ok {
			d.Allowed[i] = e.allow
			stale[i] = true
		}
		if !ok || !now.Before(e.until) {
			missing = append(missing, i)
		}
	}
	a.mu.Unlock()
	for len(missing) > 0 {
		batch := missing[:min(len(missing), maxAuthorize)]
		missing = missing[len(batch):]
		ask := make([]Perm, len(batch))
		for j, i := range batch {
			ask[j] = perms[i]
		}
		allowed, err := a.c.Authorize(ctx, token, ask)
		switch {
		case errors.Is(err, ErrACLDisabled):
			a.setACL(false, now)
			return all(), nil
		case errors.Is(err, ErrTokenNotFound):
			a.mu.Lock()
			a.tokens[key] = tokenEntry{notFound: true, until: now.Add(a.ttl)}
			a.mu.Unlock()
			return Decision{}, ErrTokenNotFound
		case err == nil && len(allowed) != len(ask):
			err = fmt.Errorf("consul answered %d authorizations for %d asked", len(allowed), len(ask))
		}
		if err != nil {
			for _, i := range batch {
				if !stale[i] {
					return Decision{}, err
				}
			}
			continue // every one of them has an earlier answer: it stands
		}
		a.mu.Lock()
		for j, i := range batch {
			d.Allowed[i] = allowed[j]
			a.makeRoom()
			a.perms[permKey{key, ask[j]}] = permEntry{allow: allowed[j], until: now.Add(a.ttl)}
		}
		a.mu.Unlock()
	}
	return d, nil
}

func (a *Authorizer) setACL(enabled bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acl = aclState{known: true, enabled: enabled, until: now.Add(a.ttl)}
}

// makeRoom keeps the cache under its bound: the answers that expired
// longest ago go first, then any (a full cache of live answers is a flood
// of distinct tokens; asking Consul again is the cost). a.mu is held.
func (a *Authorizer) makeRoom() {
	if len(a.tokens)+len(a.perms) < a.max {
		return
	}
	now := a.now()
	for k, e := range a.tokens {
		if !now.Before(e.until) {
			delete(a.tokens, k)
		}
	}
	for k, e := range a.perms {
		if !now.Before(e.until) {
			delete(a.perms, k)
		}
	}
	for k := range a.perms {
		if len(a.tokens)+len(a.perms) < a.max*3/4 {
			break
		}
		delete(a.perms, k)
	}
	for k := range a.tokens {
		if len(a.tokens)+len(a.perms) < a.max*3/4 {
			break
		}
		delete(a.tokens, k)
	}
}

// cached is how many answers the cache holds (tests).
func (a *Authorizer) cached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.tokens) + len(a.perms)
}

// RequestToken is the Consul token a request carries: X-Consul-Token, else
// Authorization: Bearer (what Prometheus' authorization block sends).
func RequestToken(r *http.Request) string {
	if t := strings.TrimSpace(r.Header.Get("X-Consul-Token")); t != "" {
		return t
	}
	if scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(t)
	}
	return ""
}

// ConsulChecker asks a Consul agent's HTTP API. It sends only the token it
// is asked about, never mariposa's own: a request without a token carries
// none, so Consul cannot answer with anyone's privileges.
type ConsulChecker struct {
	// BaseURL is the agent's API, e.g. http://127.0.0.1:8500 (for a
	// UNIX socket: any host, with Client dialling the socket).
	BaseURL string
	// Client carries the requests (the transport and TLS settings of
	// mariposa's own Consul client); default http.DefaultClient.
	Client *http.Client
}

// maxAnswer bounds what is read of Consul's answers.
const maxAnswer = 1 << 20

func (c *ConsulChecker) do(ctx context.Context, method, path, token string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	hc := c.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("consul: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, fmt.Errorf("consul: %w", err)
	}
	return resp.StatusCode, b, nil
}

// answerErr reads Consul's answer to a question about a token.
func answerErr(code int, body []byte) error {
	msg := strings.TrimSpace(string(body))
	switch {
	case code == http.StatusOK:
		return nil
	case strings.Contains(msg, "ACL support disabled"):
		return ErrACLDisabled
	case code == http.StatusForbidden && strings.Contains(msg, "ACL not found"):
		return ErrTokenNotFound
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return fmt.Errorf("consul answered %d: %s", code, msg)
}

func (c *ConsulChecker) ACLEnabled(ctx context.Context) (bool, error) {
	// An empty request list: Consul answers [] with ACLs on, "ACL support
	// disabled" without, before it looks at any token.
	code, body, err := c.do(ctx, http.MethodPost, "/v1/internal/acl/authorize", "", []Perm{})
	if err != nil {
		return false, err
	}
	switch err := answerErr(code, body); {
	case errors.Is(err, ErrACLDisabled):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

func (c *ConsulChecker) Token(ctx context.Context, token string) (string, error) {
	code, body, err := c.do(ctx, http.MethodGet, "/v1/acl/token/self", token, nil)
	if err != nil {
		return "", err
	}
	if err := answerErr(code, body); err != nil {
		return "", err
	}
	var t struct{ AccessorID string }
	if err := json.Unmarshal(body, &t); err != nil {
		return "", fmt.Errorf("consul: reading the token: %w", err)
	}
	return t.AccessorID, nil
}

func (c *ConsulChecker) Authorize(ctx context.Context, token string, perms []Perm) ([]bool, error) {
	code, body, err := c.do(ctx, http.MethodPost, "/v1/internal/acl/authorize", token, perms)
	if err != nil {
		return nil, err
	}
	if err := answerErr(code, body); err != nil {
		return nil, err
	}
	var out []struct {
		Resource, Segment, Access string
		Allow                     bool
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("consul: reading the authorizations: %w", err)
	}
	allowed := make([]bool, len(out))
	for i, o := range out {
		// Consul answers in the order asked; check it is the question.
		if i >= len(perms) || o.Resource != perms[i].Resource || o.Segment != perms[i].Segment || o.Access != perms[i].Access {
			return nil, errors.New("consul: the authorizations do not match the question")
		}
		allowed[i] = o.Allow
	}
	return allowed, nil
}
