package metrics

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Transport wraps the Consul client's transport: each request is counted
// by operation (Operation), its latency observed unless it is a blocking
// query, which is counted in mariposa_consul_blocking_queries while it
// waits; failures are counted by kind.
func (m *Metrics) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &consulTransport{next: next, m: m}
}

type consulTransport struct {
	next http.RoundTripper
	m    *Metrics
}

func (t *consulTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := Operation(req.Method, req.URL)
	blocking := isBlocking(req.URL)
	if blocking {
		g := t.m.blocking.WithLabelValues(op)
		g.Inc()
		defer g.Dec()
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	t.m.consulRequests.WithLabelValues(op).Inc()
	if !blocking {
		t.m.consulSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	}
	if kind := errorKind(req, resp, err); kind != "" {
		t.m.consulErrors.WithLabelValues(op, kind).Inc()
	}
	return resp, err
}

// errorKind says how a request failed, "" if it did not: a request its
// caller cancelled (a blocking query at shutdown) did not fail, and 404 is
// an answer (a key that does not exist).
func errorKind(req *http.Request, resp *http.Response, err error) string {
	switch {
	case err != nil:
		if req.Context().Err() != nil {
			return ""
		}
		return "transport"
	case resp.StatusCode >= 500:
		return "server"
	case resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound:
		return "client"
	}
	return ""
}

// isBlocking: a read with an index waits for a change (a blocking query).
func isBlocking(u *url.URL) bool {
	i := u.Query().Get("index")
	return i != "" && i != "0"
}

// second path segments known per area of Consul's API: an operation is
// "<area>.<second>" for these, "<area>.other" for the rest of a known area,
// and "other" outside them, so the label never holds a key, a service name
// or an ID.
var knownOps = map[string][]string{
	"agent":      {"self", "members", "services", "checks", "service", "check", "health", "metrics", "host", "join", "leave", "token", "connect", "maintenance", "reload", "monitor", "version"},
	"catalog":    {"service", "services", "node", "nodes", "node-services", "datacenters", "register", "deregister", "connect", "gateway-services"},
	"health":     {"service", "node", "checks", "state", "connect", "ingress"},
	"session":    {"create", "destroy", "renew", "info", "node", "list"},
	"status":     {"leader", "peers"},
	"acl":        {"token", "tokens", "policy", "policies", "role", "roles", "login", "logout", "bootstrap", "auth-method", "binding-rule"},
	"event":      {"fire", "list"},
	"coordinate": {"datacenters", "nodes", "node", "update"},
	"operator":   {"raft", "autopilot", "keyring", "license", "usage"},
	"internal":   {"acl", "ui"},
	"query":      {},
	"config":     {},
	"connect":    {},
	"txn":        {},
	"kv":         {},
	"snapshot":   {},
}

// agent/check/<verb>/... and agent/service/<verb>/...: the verbs.
var agentVerbs = []string{"register", "deregister", "update", "pass", "warn", "fail", "maintenance"}

// Operation names a Consul API request for a metric's label, from its
// method and path alone: kv.get, kv.list (recurse or keys), kv.put,
// kv.delete, txn, health.service, session.renew, agent.check.update,
// agent.service.register, catalog.services, ... A path outside /v1/ or an
// unknown area is "other".
func Operation(method string, u *url.URL) string {
	p, ok := strings.CutPrefix(u.Path, "/v1/")
	if !ok {
		return "other"
	}
	segs := strings.Split(p, "/")
	area := segs[0]
	second, ok := knownOps[area]
	if !ok {
		return "other"
	}
	switch area {
	case "kv":
		switch method {
		case http.MethodGet, http.MethodHead, "":
			q := u.Query()
			if q.Has("recurse") || q.Has("keys") {
				return "kv.list"
			}
			return "kv.get"
		case http.MethodPut, http.MethodPost:
			return "kv.put"
		case http.MethodDelete:
			return "kv.delete"
		}
		return "kv.other"
	case "txn", "query", "config", "connect", "snapshot":
		return area
	}
	if len(segs) < 2 || segs[1] == "" {
		return area
	}
	for _, s := range second {
		if s != segs[1] {
			continue
		}
		op := area + "." + s
		if area == "agent" && (s == "check" || s == "service") && len(segs) >= 3 {
			for _, v := range agentVerbs {
				if segs[2] == v {
					return op + "." + v
				}
			}
		}
		return op
	}
	return area + ".other"
}
