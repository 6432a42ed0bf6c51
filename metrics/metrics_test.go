package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/supervisor"
)

func TestOperation(t *testing.T) {
	for _, c := range []struct{ method, url, want string }{
		{"GET", "/v1/kv/mariposa/slots/api/0", "kv.get"},
		{"GET", "/v1/kv/mariposa/slots/?recurse=&index=42", "kv.list"},
		{"GET", "/v1/kv/mariposa/deploy/?keys", "kv.list"},
		{"PUT", "/v1/kv/mariposa/control/pause?cas=3", "kv.put"},
		{"DELETE", "/v1/kv/mariposa/audit/2026-01-01/?recurse", "kv.delete"},
		{"PUT", "/v1/txn", "txn"},
		{"GET", "/v1/health/service/web?passing=1&index=9", "health.service"},
		{"GET", "/v1/health/node/node-1", "health.node"},
		{"PUT", "/v1/session/renew/0b6a4a9c-7e5c-4a8e-9d8e-1f2e3d4c5b6a", "session.renew"},
		{"PUT", "/v1/session/create", "session.create"},
		{"PUT", "/v1/session/destroy/x", "session.destroy"},
		{"PUT", "/v1/agent/check/update/web-node-1:mariposa", "agent.check.update"},
		{"PUT", "/v1/agent/service/register?replace-existing-checks=true", "agent.service.register"},
		{"PUT", "/v1/agent/service/deregister/web-node-1", "agent.service.deregister"},
		{"GET", "/v1/agent/service/web-node-1", "agent.service"},
		{"GET", "/v1/agent/self", "agent.self"},
		{"GET", "/v1/catalog/services?index=3", "catalog.services"},
		{"GET", "/v1/catalog/service/web", "catalog.service"},
		{"GET", "/v1/status/leader", "status.leader"},
		{"GET", "/v1/acl/token/self", "acl.token"},
		{"POST", "/v1/internal/acl/authorize", "internal.acl"},
		{"GET", "/v1/health/secret-name-here", "health.other"},
		{"GET", "/v1/frobnicate/x", "other"},
		{"GET", "/ui/", "other"},
		{"GET", "/v1/health", "health"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := Operation(c.method, u); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.url, got, c.want)
		}
	}
}

// Whatever the path, the label is one of a bounded set: never a key, a
// name or an ID.
func TestOperationBounded(t *testing.T) {
	allowed := map[string]bool{"other": true}
	for area, seconds := range knownOps {
		allowed[area] = true
		allowed[area+".other"] = true
		for _, s := range seconds {
			allowed[area+"."+s] = true
			for _, v := range agentVerbs {
				allowed[area+"."+s+"."+v] = true
			}
		}
	}
	for _, k := range []string{"get", "list", "put", "delete", "other"} {
		allowed["kv."+k] = true
	}
	for _, p := range []string{"/v1/kv/a/b/c", "/v1/agent/check/x/y", "/v1/agent/service/abc", "/v1/acl/token/abc/def",
		"/v1/session/info/abc", "/v1/catalog/node/n1", "/v1/x", "/v1/", "/v1//", "/v1/agent//", "/v1/health/service/"} {
		for _, m := range []string{"GET", "PUT", "POST", "DELETE", "PATCH"} {
			u, _ := url.Parse(p)
			if op := Operation(m, u); !allowed[op] {
				t.Errorf("%s %s: %q is not a known operation", m, p, op)
			}
		}
	}
}

func TestTransport(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("index") != "":
			<-release
			w.WriteHeader(200)
		case strings.HasPrefix(r.URL.Path, "/v1/kv/missing"):
			w.WriteHeader(404)
		case strings.HasPrefix(r.URL.Path, "/v1/kv/denied"):
			w.WriteHeader(403)
		case strings.HasPrefix(r.URL.Path, "/v1/txn"):
			w.WriteHeader(500)
		default:
			w.WriteHeader(200)
		}
	}))
	defer srv.Close()
	m := New(Sources{})
	c := &http.Client{Transport: m.Transport(srv.Client().Transport)}
	get := func(method, path string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get("GET", "/v1/kv/a")
	get("GET", "/v1/kv/missing")
	get("GET", "/v1/kv/denied")
	get("PUT", "/v1/txn")
	done := make(chan struct{})
	go func() { defer close(done); get("GET", "/v1/health/service/web?index=5") }()
	blocking := m.blocking.WithLabelValues("health.service")
	deadline := time.Now().Add(5 * time.Second)
	for value(t, blocking) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the blocking query is not counted while it waits")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	<-done
	if v := value(t, blocking); v != 0 {
		t.Errorf("blocking queries after the answer: %v", v)
	}
	if v := value(t, m.consulRequests.WithLabelValues("kv.get")); v != 3 {
		t.Errorf("kv.get requests: %v, want 3", v)
	}
	if v := value(t, m.consulRequests.WithLabelValues("health.service")); v != 1 {
		t.Errorf("health.service requests: %v", v)
	}
	if n := histCount(t, m.consulSeconds.WithLabelValues("kv.get")); n != 3 {
		t.Errorf("kv.get latencies: %d, want 3", n)
	}
	if n := histCount(t, m.consulSeconds.WithLabelValues("health.service")); n != 0 {
		t.Errorf("a blocking query's wait was observed as latency (%d)", n)
	}
	if v := value(t, m.consulErrors.WithLabelValues("kv.get", "client")); v != 1 {
		t.Errorf("kv.get client errors: %v, want 1 (403 yes, 404 no)", v)
	}
	if v := value(t, m.consulErrors.WithLabelValues("txn", "server")); v != 1 {
		t.Errorf("txn server errors: %v", v)
	}

	// A request to nowhere is a transport error; one its caller cancelled
	// is not.
	get2 := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://127.0.0.1:1/v1/status/leader", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	get2(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	get2(ctx)
	if v := value(t, m.consulErrors.WithLabelValues("status.leader", "transport")); v != 1 {
		t.Errorf("transport errors: %v, want 1", v)
	}
}

func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Gauge != nil:
		return d.GetGauge().GetValue()
	case d.Counter != nil:
		return d.GetCounter().GetValue()
	}
	t.Fatalf("not a gauge or counter: %v", c.Desc())
	return 0
}

func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

func histCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var d dto.Metric
	if err := o.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

func histSum(t *testing.T, o prometheus.Observer) float64 {
	t.Helper()
	var d dto.Metric
	if err := o.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleSum()
}

func TestEvents(t *testing.T) {
	m := New(Sources{})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(kind supervisor.EventKind, at time.Duration, reason string) {
		m.Event(supervisor.Event{Time: t0.Add(at), Service: "web", ServiceID: "web-n1", Kind: kind, Reason: reason})
	}
	// An exit, a restart by the policy after 2 s.
	ev(supervisor.EventStarted, 0, "running")
	ev(supervisor.EventExited, time.Second, "exit 1")
	ev(supervisor.EventRestarting, time.Second, "restarting at 10:00:03 after exit 1, attempt 1")
	ev(supervisor.EventStarted, 3*time.Second, "running")
	// A failure to start, then a start.
	ev(supervisor.EventStartFailed, 4*time.Second, "exec: no such file")
	ev(supervisor.EventRestarting, 4*time.Second, "restarting now after start failed, attempt 1")
	ev(supervisor.EventStarted, 5*time.Second, "running")
	// A check critical for too long: restarted after 1.5 s.
	ev(supervisor.EventUnhealthy, 10*time.Second, `check "http" critical; restarting`)
	ev(supervisor.EventStopped, 11*time.Second, "exit 0")
	ev(supervisor.EventRestarting, 11*time.Second, `restarting now after check "http" critical, attempt 1`)
	ev(supervisor.EventStarted, 11500*time.Millisecond, "running")
	// Changes: a template, a dependency back, an operator, leadership.
	ev(supervisor.EventRendered, 12*time.Second, "/etc/web.conf")
	ev(supervisor.EventRestarting, 12*time.Second, "template /etc/web.conf changed")
	ev(supervisor.EventStarted, 13*time.Second, "running")
	ev(supervisor.EventRestarting, 14*time.Second, "dependency db came back")
	ev(supervisor.EventRestarting, 15*time.Second, "restarted by an operator")
	ev(supervisor.EventRestarting, 16*time.Second, "leadership lost")
	ev(supervisor.EventOperator, 17*time.Second, "restart")
	ev(supervisor.EventOperator, 17*time.Second, "reset")
	// A wait for a dependency of 4 s (two reasons, one wait).
	ev(supervisor.EventWaiting, 20*time.Second, "waiting: web needs 1 passing db, has 0")
	ev(supervisor.EventWaiting, 22*time.Second, "waiting: template x needs key y")
	ev(supervisor.EventStarted, 24*time.Second, "running")
	// Two terms in decide's order (supervisor's TestLeaderFailoverMetricsFromDecide
	// feeds what decide emits): one lost with its session, one resigned,
	// whose end decide reports as leader-lost after leader-resigned.
	ev(supervisor.EventLeaderAcquired, 25*time.Second, "k")
	ev(supervisor.EventLeaderLost, 26*time.Second, "session invalidated")
	ev(supervisor.EventLeaderAcquired, 26*time.Second, "k")
	ev(supervisor.EventLeaderResigned, 27*time.Second, "restarts exhausted")
	ev(supervisor.EventLeaderLost, 27*time.Second, "stopped contending")
	// A failure for good: a later start (an operator's) is no restart
	// delay.
	ev(supervisor.EventExited, 30*time.Second, "exit 1")
	ev(supervisor.EventFailed, 30*time.Second, "failed: 3 restarts in 1m")
	ev(supervisor.EventStarted, 90*time.Second, "running")
	ev(supervisor.EventStoppedForGood, 100*time.Second, "")

	want := map[string]float64{ReasonExit: 1, ReasonStartFailed: 1, ReasonUnhealthy: 1, ReasonTemplate: 1,
		ReasonDependency: 1, ReasonOperator: 2, ReasonLeader: 1}
	for reason, n := range want {
		if v := value(t, m.restarts.WithLabelValues("web", reason)); v != n {
			t.Errorf("restarts{reason=%q}: %v, want %v", reason, v, n)
		}
	}
	if n := count(m.restarts); n != len(want) {
		t.Errorf("%d restart series, want %d", n, len(want))
	}
	rd := m.restartDelay.WithLabelValues("web")
	if n, s := histCount(t, rd), histSum(t, rd); n != 2 || s != 3 {
		t.Errorf("restart delays: %d observations, sum %v; want 2, 3 s", n, s)
	}
	uw := m.unhealthyWait.WithLabelValues("web")
	if n, s := histCount(t, uw), histSum(t, uw); n != 1 || s != 1.5 {
		t.Errorf("unhealthy restarts: %d, sum %v; want 1, 1.5 s", n, s)
	}
	if v := value(t, m.depWaits.WithLabelValues("web")); v != 1 {
		t.Errorf("dependency waits: %v, want 1", v)
	}
	dw := m.depWaitTime.WithLabelValues("web")
	if n, s := histCount(t, dw), histSum(t, dw); n != 1 || s != 4 {
		t.Errorf("dependency wait: %d, sum %v; want 1, 4 s", n, s)
	}
	if v := value(t, m.leaderTerms.WithLabelValues("web")); v != 2 {
		t.Errorf("leader terms: %v, want 2", v)
	}
	if lost, resigned := value(t, m.leaderLosses.WithLabelValues("web", "lost")), value(t, m.leaderLosses.WithLabelValues("web", "resigned")); lost != 1 || resigned != 1 {
		t.Errorf("leader failovers: lost %v, resigned %v; want 1 and 1 (one per term)", lost, resigned)
	}
	if v := value(t, m.events.WithLabelValues("web", "started")); v != 7 {
		t.Errorf("started events: %v, want 7", v)
	}
	m.mu.Lock()
	n := len(m.insts)
	m.mu.Unlock()
	if n != 0 {
		t.Errorf("%d instances still tracked after instance-stopped", n)
	}
}

func TestRenders(t *testing.T) {
	m := New(Sources{})
	m.ObserveRender("web", true, false)
	m.ObserveRender("web", false, false) // unchanged: not a render that wrote
	m.ObserveRender("web", false, true)
	if v := value(t, m.renders.WithLabelValues("web")); v != 1 {
		t.Errorf("renders: %v", v)
	}
	if v := value(t, m.renderErrors.WithLabelValues("web")); v != 1 {
		t.Errorf("render errors: %v", v)
	}
}

func TestInstancesAndFleet(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	snaps := []supervisor.Snapshot{{Service: "web", State: supervisor.StateRunning}, {Service: "web", State: supervisor.StateRunning},
		{Service: "db", State: supervisor.StateBackoff}}
	st := cluster.FleetStats{Node: "n1", Ready: true, LiveNodes: 3, StormBrake: true,
		Units: []cluster.UnitStats{{Unit: "api", Desired: 3, Held: 1, Free: 1, Failed: 1, Slots: []cluster.SlotStats{
			{K: 0, State: "held", Mine: true},
			{K: 1, State: "free", VacantSince: t0.Add(-5 * time.Second)},
			{K: 2, State: "failed", Reschedules: []placement.RescheduleEvent{{Node: "n1", At: t0.Add(-time.Hour)}}},
		}}},
		Pauses: []cluster.PauseRecord{{Scope: cluster.PausePlacement}}, HeldBack: 4,
		Deployments: []cluster.DeploymentStats{{Name: "a", Status: cluster.DeployRunning}, {Name: "b", Status: cluster.DeployRunning}, {Name: "c", Status: cluster.DeployFailed}}}
	m := New(Sources{Snapshots: func() []supervisor.Snapshot { return snaps },
		Fleet: func() (cluster.FleetStats, bool) { return st, true }})
	m.fleet.now, m.fleet.start = func() time.Time { return now }, t0

	got := gather(t, m)
	for series, want := range map[string]float64{
		`mariposa_instances{service="web",state="running"}`:  2,
		`mariposa_instances{service="db",state="backoff"}`:   1,
		`mariposa_slots{kind="desired",unit="api"}`:          3,
		`mariposa_slots{kind="held",unit="api"}`:             1,
		`mariposa_slots{kind="free",unit="api"}`:             1,
		`mariposa_slots{kind="failed",unit="api"}`:           1,
		`mariposa_node_slots{unit="api"}`:                    1,
		`mariposa_slot_vacancy_seconds{unit="api"}`:          5,
		`mariposa_reschedules_total{unit="api"}`:             0, // older than the process
		`mariposa_deployments{status="running"}`:             2,
		`mariposa_deployments{status="failed"}`:              1,
		`mariposa_deployments{status="cancelled"}`:           0,
		`mariposa_storm_brake`:                               1,
		`mariposa_fleet_live_nodes`:                          3,
		`mariposa_paused{scope="all"}`:                       0,
		`mariposa_paused{scope="placement"}`:                 1,
		`mariposa_paused_actions`:                            4,
		`mariposa_build_info{commit="` + commitOf(got) + `"`: -1, // present
	} {
		if want == -1 {
			continue
		}
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	// A state no instance is in is not reported (1,000 services would
	// otherwise be 9,000 series, most of them zeros).
	if v, ok := got[`mariposa_instances{service="web",state="failed"}`]; ok {
		t.Errorf("mariposa_instances reports a state nobody is in: failed = %v", v)
	}
	// This node reschedules api/2 twice, another node once: two counted,
	// each once however many scrapes see it.
	st.Units[0].Slots[2].Reschedules = append(st.Units[0].Slots[2].Reschedules,
		placement.RescheduleEvent{Node: "n1", At: t0.Add(time.Second)}, placement.RescheduleEvent{Node: "n2", At: t0.Add(2 * time.Second)},
		placement.RescheduleEvent{Node: "n1", At: t0.Add(3 * time.Second)})
	for range 3 {
		got = gather(t, m)
	}
	if v := got[`mariposa_reschedules_total{unit="api"}`]; v != 2 {
		t.Errorf("reschedules: %v, want 2", v)
	}
	// Without a fleet: no fleet metrics.
	m2 := New(Sources{Fleet: func() (cluster.FleetStats, bool) { return cluster.FleetStats{}, false }})
	for k := range gather(t, m2) {
		if strings.HasPrefix(k, "mariposa_slots") || strings.HasPrefix(k, "mariposa_deployments") {
			t.Errorf("without a fleet: %s", k)
		}
	}
}

func commitOf(got map[string]float64) string {
	for k := range got {
		if strings.HasPrefix(k, "mariposa_build_info") {
			if m := regexp.MustCompile(`commit="([^"]*)"`).FindStringSubmatch(k); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

// gather scrapes the registry: series (name{labels}) -> value.
func gather(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			sort.Strings(ls)
			key := mf.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case mt.Gauge != nil:
				out[key] = mt.GetGauge().GetValue()
			case mt.Counter != nil:
				out[key] = mt.GetCounter().GetValue()
			}
		}
	}
	return out
}

// The catalog (what the docs list) is exactly the registry's mariposa_*
// metrics, with their help.
func TestCatalogIsTheRegistry(t *testing.T) {
	m := New(Sources{})
	descs := make(chan *prometheus.Desc, 1000)
	for _, c := range m.collectors {
		c.Describe(descs)
	}
	close(descs)
	re := regexp.MustCompile(`fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)"`)
	reg := map[string]string{}
	for d := range descs {
		mm := re.FindStringSubmatch(d.String())
		if mm == nil {
			t.Fatalf("cannot read %s", d)
		}
		if strings.HasPrefix(mm[1], "mariposa_") {
			reg[mm[1]] = mm[2]
		}
	}
	cat := map[string]bool{}
	for _, i := range m.Catalog() {
		cat[i.Name] = true
		if _, ok := reg[i.Name]; !ok {
			t.Errorf("%s is in the catalog, not in the registry", i.Name)
		}
		if i.Help == "" || !strings.HasSuffix(i.Help, ".") {
			t.Errorf("%s: help %q", i.Name, i.Help)
		}
	}
	for n := range reg {
		if !cat[n] {
			t.Errorf("%s is registered, not in the catalog", n)
		}
	}
	if len(cat) < 20 {
		t.Errorf("only %d metrics", len(cat))
	}
}

// TestOOMKilledRestartReason: an exit the OOM killer caused counts its
// restart as oom-killed, not as a plain exit.
func TestOOMKilledRestartReason(t *testing.T) {
	m := New(Sources{})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(kind supervisor.EventKind, reason string) {
		m.Event(supervisor.Event{Time: t0, Service: "hog", ServiceID: "hog-n1", Kind: kind, Reason: reason})
	}
	ev(supervisor.EventStarted, "running")
	ev(supervisor.EventExited, "oom-killed (killed by SIGKILL)")
	ev(supervisor.EventRestarting, "restarting in 1s after oom-killed (killed by SIGKILL), attempt 1/10")
	if v := value(t, m.restarts.WithLabelValues("hog", ReasonOOMKilled)); v != 1 {
		t.Errorf("restarts{reason=oom-killed}: %v, want 1", v)
	}
	if v := value(t, m.restarts.WithLabelValues("hog", ReasonExit)); v != 0 {
		t.Errorf("restarts{reason=exit}: %v, want 0", v)
	}
}
