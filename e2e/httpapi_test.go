package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/nodeapi"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// apiURL reads a node's HTTP API from mariposa's own registration, and
// checks the service's port is the API's.
func apiURL(t testing.TB, c *api.Client, node string) string {
	t.Helper()
	var url string
	waitFor(t, 20*time.Second, "mariposa's registration with its HTTP API", func() (bool, string) {
		svcs, _, err := c.Catalog().Service("mariposa", "", nil)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range svcs {
			if s.Node != node {
				continue
			}
			url = s.ServiceMeta[supervisor.HTTPAPIMetaKey]
			if url == "" || !strings.HasSuffix(url, ":"+strconv.Itoa(s.ServicePort)) || s.ServiceAddress != "127.0.0.1" {
				return false, fmt.Sprintf("meta %v, address %q, port %d", s.ServiceMeta, s.ServiceAddress, s.ServicePort)
			}
			return true, url
		}
		return false, fmt.Sprintf("no mariposa service on %s in %d", node, len(svcs))
	})
	return url
}

// get does one request to the API with token ("" for none).
func get(t testing.TB, method, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// scrape reads /metrics with Prometheus' own text parser.
func scrape(t testing.TB, base, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return mfs
}

// sample is the value of one series of a family (a counter, a gauge, or a
// histogram's count), -1 when absent.
func sample(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	mf := mfs[name]
	if mf == nil {
		return -1
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// followEvents opens /v1/events?follow=1 and returns the decoded events as
// they come.
func followEvents(t testing.TB, base, token string) <-chan supervisor.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events?follow=1&n=0", nil)
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("follow: %d %s", resp.StatusCode, b)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	ch := make(chan supervisor.Event, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var e supervisor.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Kind != "" {
				ch <- e
			}
		}
	}()
	return ch
}

// awaitEvent waits for an event matching want on ch.
func awaitEvent(t testing.TB, ch <-chan supervisor.Event, what string, want func(supervisor.Event) bool) supervisor.Event {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("the event stream ended before %s", what)
			}
			if want(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s streamed within 20s", what)
		}
	}
}

// TestHTTPAPIMetrics: on a real agent without ACLs, the node's API is
// found through mariposa's registration; /metrics parses with Prometheus'
// parser and its values follow what happens (a process that exits is
// restarted for reason exit, with its delay observed; template renders are
// counted, and a KV change adds one); the rendered event is streamed to a
// follower as it happens; the logs are the bounded ring.
func TestHTTPAPIMetrics(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	if _, err := c.KV().Put(&api.KVPair{Key: "app/greeting", Value: []byte("hello")}, nil); err != nil {
		t.Fatal(err)
	}
	hcl := writeHCL(t, fmt.Sprintf(`
service "flaky" {
  command = [%q, "-exit-after", "300ms", "-exit-code", "3"]
  restart {
    policy   = "always"
    attempts = 1000
    delay    = "50ms"
  }
}

service "conf" {
  command = [%q]
  dir     = %q
  template {
    contents    = "greeting = {{ key \"app/greeting\" }}\n"
    destination = "greeting.conf"
    change_mode = "noop"
  }
}

service "chatty" {
  command = ["/bin/sh", "-c", "i=0; while [ $i -lt 1500 ]; do echo line $i; i=$((i+1)); done; exec sleep 3600"]
}
`, childBin, childBin, dir))
	startMariposa(t, agent, nil, "-http-addr", "127.0.0.1:0", hcl)
	base := apiURL(t, c, agent.Name)

	var mfs map[string]*dto.MetricFamily
	waitFor(t, 20*time.Second, "restarts for reason exit, and the first render, in /metrics", func() (bool, string) {
		mfs = scrape(t, base, "")
		r := sample(mfs, "mariposa_restarts_total", map[string]string{"service": "flaky", "reason": "exit"})
		d := sample(mfs, "mariposa_restart_delay_seconds", map[string]string{"service": "flaky"})
		n := sample(mfs, "mariposa_renders_total", map[string]string{"service": "conf"})
		return r >= 2 && d >= 1 && n == 1, fmt.Sprintf("restarts %v, delays %v, renders %v", r, d, n)
	})
	if v := sample(mfs, "mariposa_restarts_total", map[string]string{"service": "flaky", "reason": "unhealthy"}); v > 0 {
		t.Errorf("restarts for reason unhealthy: %v", v)
	}
	if v := sample(mfs, "mariposa_instances", map[string]string{"service": "conf", "state": "running"}); v != 1 {
		t.Errorf("conf running: %v", v)
	}
	for _, name := range []string{"mariposa_consul_requests_total", "mariposa_consul_request_seconds", "mariposa_consul_blocking_queries", "mariposa_build_info"} {
		if mfs[name] == nil {
			t.Errorf("%s is missing from /metrics", name)
		}
	}
	waitFor(t, 10*time.Second, "the node's health watch counted as a blocking query held", func() (bool, string) {
		v := sample(scrape(t, base, ""), "mariposa_consul_blocking_queries", map[string]string{"op": "health.node"})
		return v >= 1, fmt.Sprint(v)
	})

	// A follower sees the render a KV change causes, as it happens.
	events := followEvents(t, base, "")
	if _, err := c.KV().Put(&api.KVPair{Key: "app/greeting", Value: []byte("bonjour")}, nil); err != nil {
		t.Fatal(err)
	}
	e := awaitEvent(t, events, "a rendered event of conf", func(e supervisor.Event) bool {
		return e.Service == "conf" && e.Kind == supervisor.EventRendered
	})
	if e.Node != agent.Name || !strings.HasSuffix(e.Reason, "greeting.conf") {
		t.Errorf("rendered event: %+v", e)
	}
	waitFor(t, 10*time.Second, "the second render counted", func() (bool, string) {
		n := sample(scrape(t, base, ""), "mariposa_renders_total", map[string]string{"service": "conf"})
		return n == 2, fmt.Sprint(n)
	})
	if b, _ := os.ReadFile(filepath.Join(dir, "greeting.conf")); string(b) != "greeting = bonjour\n" {
		t.Errorf("file %q", b)
	}

	// Status: every instance of the node.
	code, body := get(t, "GET", base+"/v1/status", "")
	var st nodeapi.Status
	if err := json.Unmarshal(body, &st); code != 200 || err != nil {
		t.Fatalf("status: %d %s %v", code, body, err)
	}
	if st.Node != agent.Name || len(st.Instances) != 3 {
		t.Errorf("status: %+v", st)
	}

	// Logs: the ring keeps the last lines (its bounds), ?n the last n.
	waitFor(t, 10*time.Second, "chatty's last line in its logs", func() (bool, string) {
		_, b := get(t, "GET", base+"/v1/logs/chatty?n=1&format=text", "")
		return strings.HasSuffix(strings.TrimSpace(string(b)), "line 1499"), string(b)
	})
	_, b := get(t, "GET", base+"/v1/logs/chatty?n=100000&format=text", "")
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) >= 1500 || len(lines) < 100 || !strings.HasSuffix(lines[len(lines)-1], "line 1499") {
		t.Errorf("logs: %d lines, the last %q; want the ring's last lines, fewer than 1500", len(lines), lines[len(lines)-1])
	}
	if _, b := get(t, "GET", base+"/v1/logs/chatty?n=2&format=text", ""); strings.Count(string(b), "\n") != 2 {
		t.Errorf("n=2: %q", b)
	}
}

// ACL policies for TestHTTPAPIACL.
const (
	apiReaderPolicy = `
node_prefix "" {
  policy = "read"
}
service "web" {
  policy = "read"
}
`
	apiWriterPolicy = `
service "web" {
  policy = "write"
}
`
	apiPrometheusPolicy = `
agent_prefix "" {
  policy = "read"
}
`
)

// TestHTTPAPIACL: with Consul's ACLs on (default deny), the node's API
// refuses a request without a token or with one Consul does not know, and
// answers one whose token has the permission the endpoint needs, as Consul
// answers it.
func TestHTTPAPIACL(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t, consultest.Options{ACL: true})
	root := agent.Client(t)
	token := func(name, rules string) string {
		pol, _, err := root.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := root.ACL().TokenCreate(&api.ACLToken{Description: name, Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok.SecretID
	}
	reader, writer, prom := token("api-reader", apiReaderPolicy), token("api-writer", apiWriterPolicy), token("api-prometheus", apiPrometheusPolicy)

	hcl := writeHCL(t, fmt.Sprintf(`
service "web" {
  command = [%q]
}
service "db" {
  command = [%q]
}
`, childBin, childBin))
	m := startMariposa(t, agent, []string{"CONSUL_HTTP_TOKEN=" + consultest.ManagementToken}, "-http-addr", "127.0.0.1:0", hcl)
	base := apiURL(t, root, agent.Name)
	pid := waitRunning(t, root, "web", agent.Name)
	// web's first line is in its ring (read from its pipe a moment after
	// the start).
	waitFor(t, 10*time.Second, "web's first line in its logs", func() (bool, string) {
		_, b := get(t, "GET", base+"/v1/logs/web", reader)
		return strings.Contains(string(b), "testchild"), string(b)
	})

	for _, c := range []struct {
		method, path, token string
		code                int
		has, hasNot         string
	}{
		{"GET", "/v1/status", "", 401, "token is needed", ""},
		{"GET", "/v1/status", "00000000-0000-0000-0000-00000000dead", 403, "ACL not found", ""},
		{"GET", "/v1/status", writer, 403, "node:read", ""},
		{"GET", "/v1/status", reader, 200, `"web-` + agent.Name + `"`, `"db-`},
		{"GET", "/v1/logs/web", reader, 200, "testchild", ""},
		{"GET", "/v1/logs/db", reader, 403, "service:read", ""},
		{"POST", "/v1/restart/web", reader, 403, "service:write", ""},
		{"GET", "/metrics", "", 401, "", ""},
		{"GET", "/metrics", reader, 403, "agent:read", ""},
		{"GET", "/metrics", prom, 200, "mariposa_instances", ""},
	} {
		code, body := get(t, c.method, base+c.path, c.token)
		if code != c.code || !strings.Contains(string(body), c.has) || (c.hasNot != "" && strings.Contains(string(body), c.hasNot)) {
			t.Errorf("%s %s: %d %s; want %d with %q, without %q", c.method, c.path, code, body, c.code, c.has, c.hasNot)
		}
	}
	// Prometheus' parser reads what a token with agent:read gets.
	if v := sample(scrape(t, base, prom), "mariposa_instances", map[string]string{"service": "web", "state": "running"}); v != 1 {
		t.Errorf("web running: %v", v)
	}

	// A reader follows the events; a writer restarts web; the reader sees
	// the restart, and nothing of db.
	events := followEvents(t, base, reader)
	if code, body := get(t, "POST", base+"/v1/restart/web", writer); code != 200 {
		t.Fatalf("restart with service:write: %d %s", code, body)
	}
	awaitEvent(t, events, "web's restart", func(e supervisor.Event) bool {
		if e.Service != "web" {
			t.Errorf("the reader was shown an event of %s", e.Service)
		}
		return e.Kind == supervisor.EventStarted
	})
	pid = waitRunning(t, root, "web", agent.Name, pid)
	// db exits and restarts: none of it reaches the reader, who sees
	// web's next restart and nothing between.
	dbPID := waitRunning(t, root, "db", agent.Name)
	_ = syscall.Kill(dbPID, syscall.SIGKILL)
	waitRunning(t, root, "db", agent.Name, dbPID)
	if code, body := get(t, "POST", base+"/v1/restart/web", writer); code != 200 {
		t.Fatalf("restart with service:write: %d %s", code, body)
	}
	awaitEvent(t, events, "web's second restart", func(e supervisor.Event) bool {
		if e.Service != "web" {
			t.Errorf("the reader was shown an event of %s", e.Service)
		}
		return e.Kind == supervisor.EventStarted
	})
	waitRunning(t, root, "web", agent.Name, pid)
	mfs := scrape(t, base, prom)
	if v := sample(mfs, "mariposa_restarts_total", map[string]string{"service": "web", "reason": "operator"}); v != 2 {
		t.Errorf("web's restarts by an operator: %v, want 2", v)
	}
	if v := sample(mfs, "mariposa_restarts_total", map[string]string{"service": "db", "reason": "exit"}); v != 1 {
		t.Errorf("db's restarts after an exit: %v, want 1", v)
	}
	if code := m.stop(t, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, tok := range []string{reader, writer, prom, consultest.ManagementToken} {
		if strings.Contains(m.out.String(), tok) {
			t.Error("a token appears in mariposa's log")
		}
	}
}

// TestHTTPAPIFleetMetrics: with -cluster on one node, /metrics reports the
// unit's slots as the fleet member reads them (count 2, max_per_node 1 on
// one node: one held here, one free), the supervisors live, and a pause as
// soon as the node reads it.
func TestHTTPAPIFleetMetrics(t *testing.T) {
	t.Parallel()
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	hcl := writeHCL(t, fmt.Sprintf(`
service "solo" {
  command = [%q]
  count   = 2
}
`, childBin))
	startMariposa(t, agent, nil, "-cluster", "-http-addr", "127.0.0.1:0", hcl)
	base := apiURL(t, c, agent.Name)
	unit := func(kind string) map[string]string { return map[string]string{"unit": "solo", "kind": kind} }
	waitFor(t, 30*time.Second, "solo's slots in /metrics", func() (bool, string) {
		mfs := scrape(t, base, "")
		d, h, f, x := sample(mfs, "mariposa_slots", unit("desired")), sample(mfs, "mariposa_slots", unit("held")),
			sample(mfs, "mariposa_slots", unit("free")), sample(mfs, "mariposa_slots", unit("failed"))
		mine := sample(mfs, "mariposa_node_slots", map[string]string{"unit": "solo"})
		live := sample(mfs, "mariposa_fleet_live_nodes", nil)
		run := sample(mfs, "mariposa_instances", map[string]string{"service": "solo", "state": "running"})
		claims := sample(mfs, "mariposa_claim_delay_seconds", map[string]string{"unit": "solo"}) // its sample count
		return d == 2 && h == 1 && f == 1 && x == 0 && mine == 1 && live == 1 && run == 1 && claims == 1,
			fmt.Sprintf("desired %v held %v free %v failed %v mine %v live %v running %v claims %v", d, h, f, x, mine, live, run, claims)
	})
	if _, err := cluster.Pause(c, "", cluster.PausePlacement, "maintenance window", "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the pause in /metrics", func() (bool, string) {
		mfs := scrape(t, base, "")
		p, a := sample(mfs, "mariposa_paused", map[string]string{"scope": "placement"}), sample(mfs, "mariposa_paused", map[string]string{"scope": "all"})
		return p == 1 && a == 0, fmt.Sprintf("placement %v, all %v", p, a)
	})
}
