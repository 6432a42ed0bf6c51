package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// timingProxy stands between a supervisor (or `consul lock`) and its
// agent and stamps each request's start and end on CLOCK_MONOTONIC, the
// clock the stamp children use: the Consul round trips of a leader
// handover, named and timed (BenchmarkLeaderFailover).
type timingProxy struct {
	addr string
	mu   sync.Mutex
	reqs []timedRequest
}

// timedRequest is one request through a timingProxy.
type timedRequest struct {
	start, end   time.Duration
	method, path string
	query        string
	body         string // the start of a write's body
}

func newTimingProxy(b testing.TB, target string) *timingProxy {
	p := &timingProxy{}
	p.addr = consultest.AgentProxy(b, target, func(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
		tr := timedRequest{start: leadertest.Mono(), method: r.Method, path: r.URL.Path, query: r.URL.RawQuery}
		if r.Body != nil && r.Method != http.MethodGet {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			tr.body = string(body[:min(len(body), 2048)])
		}
		rp.ServeHTTP(w, r)
		tr.end = leadertest.Mono()
		p.mu.Lock()
		p.reqs = append(p.reqs, tr)
		p.mu.Unlock()
	}, func(rp *httputil.ReverseProxy) {
		rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	})
	return p
}

func (p *timingProxy) requests() []timedRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]timedRequest(nil), p.reqs...)
}

// isRelease: the request gives a lock back (a KV release, or a
// transaction that unlocks).
func (r timedRequest) isRelease() bool {
	return r.method == http.MethodPut && (strings.HasPrefix(r.path, "/v1/kv/") && strings.Contains(r.query, "release=") ||
		r.path == "/v1/txn" && strings.Contains(r.body, `"unlock"`))
}

// isAcquire: the request takes a lock (a KV acquire, or a transaction
// that locks).
func (r timedRequest) isAcquire() bool {
	return r.method == http.MethodPut && (strings.HasPrefix(r.path, "/v1/kv/") && strings.Contains(r.query, "acquire=") ||
		r.path == "/v1/txn" && strings.Contains(r.body, `"lock"`))
}

// key is the KV key a request reads, locks or unlocks: its path's, or the
// first key of a transaction's lock or unlock.
func (r timedRequest) key() string {
	if k, ok := strings.CutPrefix(r.path, "/v1/kv/"); ok {
		return k
	}
	for _, verb := range []string{`"Verb":"lock","Key":"`, `"Verb":"unlock","Key":"`} {
		if _, rest, ok := strings.Cut(r.body, verb); ok {
			k, _, _ := strings.Cut(rest, `"`)
			return k
		}
	}
	return ""
}

// name says what a request is, briefly.
func (r timedRequest) name() string {
	switch {
	case r.isRelease():
		return "release"
	case r.isAcquire():
		return "acquire"
	case r.method == http.MethodGet && strings.HasPrefix(r.path, "/v1/kv/"):
		if strings.Contains(r.query, "index=") {
			return "blocking KV read"
		}
		return "KV read"
	}
	// /v1/session/destroy/<id> -> /v1/session/destroy
	p := r.path
	if parts := strings.Split(p, "/"); len(parts) > 4 {
		p = strings.Join(parts[:4], "/")
	}
	return r.method + " " + p
}

// handoverPhases is one handover cut at its Consul round trips.
type handoverPhases struct {
	ok bool
	// stop -> release sent; the release's round trip; release sent ->
	// the standby's blocking read answered; that answer -> acquire sent;
	// the acquire's round trip; its answer -> the child's first
	// instruction; the whole.
	toRelease, release, toWake, toAcquire, acquire, toChild, total time.Duration
	before, between, after                                         []string // other requests: the leader's before its release, the standby's between wake and acquire, and after
}

// phasesOf cuts each handover window at the requests the proxies saw.
func phasesOf(tps map[string]*timingProxy, ws []handoverWindow) []handoverPhases {
	reqs := map[string][]timedRequest{}
	for n, p := range tps {
		reqs[n] = p.requests()
	}
	var out []handoverPhases
	for _, w := range ws {
		var ph handoverPhases
		ph.total = w.started - w.t0
		if ph.total > time.Second {
			// Not a handover of the kind measured (a retry, a harness
			// race): its window holds other rounds' requests.
			out = append(out, ph)
			continue
		}
		// The lock is the key the standby acquired; the release and the
		// standby's wake are on that key (not, say, a node lock's).
		var rel, acq, wake *timedRequest
		standby := ""
		for n, rs := range reqs {
			if n == w.leader {
				continue
			}
			for i, r := range rs {
				if r.start >= w.t0 && r.start <= w.started && r.isAcquire() {
					acq, standby = &rs[i], n
				}
			}
		}
		if acq == nil {
			out = append(out, ph)
			continue
		}
		for i, r := range reqs[w.leader] {
			if r.start >= w.t0 && r.start <= w.started && r.isRelease() && r.key() == acq.key() {
				rel = &reqs[w.leader][i]
				break
			}
		}
		if rel == nil {
			out = append(out, ph)
			continue
		}
		for i, r := range reqs[standby] {
			if r.method == http.MethodGet && r.key() == acq.key() && r.end >= rel.start && r.end <= acq.start {
				wake = &reqs[standby][i]
				break
			}
		}
		if wake == nil {
			out = append(out, ph)
			continue
		}
		for _, r := range reqs[w.leader] {
			if r.start >= w.t0 && r.start < rel.start {
				ph.before = append(ph.before, r.name())
			}
		}
		for _, r := range reqs[standby] {
			switch {
			case r.start > wake.end && r.start < acq.start:
				ph.between = append(ph.between, r.name())
			case r.start > acq.start && r.start < w.started:
				ph.after = append(ph.after, r.name())
			}
		}
		ph.ok = true
		ph.toRelease, ph.release = rel.start-w.t0, rel.end-rel.start
		ph.toWake, ph.toAcquire = wake.end-rel.start, acq.start-wake.end
		ph.acquire, ph.toChild = acq.end-acq.start, w.started-acq.end
		out = append(out, ph)
	}
	return out
}

// phaseTable prints the phases' medians side by side, with the other
// requests seen on the path.
func phaseTable(m, l []handoverPhases) string {
	med := func(ps []handoverPhases, f func(handoverPhases) time.Duration) string {
		var v latencies
		for _, p := range ps {
			if p.ok {
				v = append(v, f(p))
			}
		}
		if len(v) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", ms(v.pct(0.5)))
	}
	others := func(ps []handoverPhases, f func(handoverPhases) []string) string {
		n := map[string]int{}
		cut := 0
		for _, p := range ps {
			if p.ok {
				cut++
				for _, s := range f(p) {
					n[s]++
				}
			}
		}
		var parts []string
		for k, v := range n {
			parts = append(parts, fmt.Sprintf("%s x%.1f", k, float64(v)/float64(max(cut, 1))))
		}
		sort.Strings(parts)
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, ", ")
	}
	cut := func(ps []handoverPhases) int {
		n := 0
		for _, p := range ps {
			if p.ok {
				n++
			}
		}
		return n
	}
	rows := []struct {
		what string
		f    func(handoverPhases) time.Duration
	}{
		{"stop -> release sent (the child stopped and reaped)", func(p handoverPhases) time.Duration { return p.toRelease }},
		{"release round trip (a Raft write)", func(p handoverPhases) time.Duration { return p.release }},
		{"release sent -> standby's blocking read answered", func(p handoverPhases) time.Duration { return p.toWake }},
		{"  (of which after the release was answered)", func(p handoverPhases) time.Duration { return p.toWake - p.release }},
		{"standby's read answered -> acquire sent", func(p handoverPhases) time.Duration { return p.toAcquire }},
		{"acquire round trip (a Raft write)", func(p handoverPhases) time.Duration { return p.acquire }},
		{"acquire answered -> child's first instruction", func(p handoverPhases) time.Duration { return p.toChild }},
		{"the whole handover", func(p handoverPhases) time.Duration { return p.total }},
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "  %-55s %9s %12s\n", "phase (p50 ms)", "mariposa", "consul lock")
	for _, r := range rows {
		fmt.Fprintf(&sb, "  %-55s %9s %12s\n", r.what, med(m, r.f), med(l, r.f))
	}
	fmt.Fprintf(&sb, "  handovers cut at their round trips: mariposa %d of %d, consul lock %d of %d\n", cut(m), len(m), cut(l), len(l))
	fmt.Fprintf(&sb, "  other requests per handover: the leader's before its release: mariposa %s; consul lock %s\n",
		others(m, func(p handoverPhases) []string { return p.before }), others(l, func(p handoverPhases) []string { return p.before }))
	fmt.Fprintf(&sb, "  the standby's between its read and its acquire: mariposa %s; consul lock %s\n",
		others(m, func(p handoverPhases) []string { return p.between }), others(l, func(p handoverPhases) []string { return p.between }))
	fmt.Fprintf(&sb, "  the standby's between its acquire and its child: mariposa %s; consul lock %s\n",
		others(m, func(p handoverPhases) []string { return p.after }), others(l, func(p handoverPhases) []string { return p.after }))
	return sb.String()
}
