package render

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// TestKVChangeRewritesOnce: each KV change rewrites the file exactly once and
// hands out one event; a write of the same value changes nothing.
func TestKVChangeRewritesOnce(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "app/config", "v1")
	dir := t.TempDir()
	svc := templateService(dir, "web", "value={{ key \"app/config\" }}\n")
	dest := svc.Templates[0].Destination
	f := follow(m.Service(svc))

	f.until(t, "first render", func(s ServiceState) bool { return s.TemplatesReady })
	if got := readFile(t, dest); got != "value=v1\n" {
		t.Fatalf("file %q", got)
	}
	if len(f.events) != 0 || renders(f.sd, 0) != 1 {
		t.Fatalf("first render: %d events, %d writes; want 0 events (nothing runs yet), 1 write", len(f.events), renders(f.sd, 0))
	}

	put(t, c, "app/config", "v2")
	f.until(t, "an event for v2", func(ServiceState) bool { return len(f.events) == 1 })
	if got := readFile(t, dest); got != "value=v2\n" {
		t.Fatalf("file %q at the event; the file must be on disk first", got)
	}
	if ev := f.events[0]; ev.Template != svc.Templates[0] || ev.Destination != dest {
		t.Fatalf("event %+v", ev)
	}

	// Same value again, then a real change: only the real one renders.
	put(t, c, "app/config", "v2")
	put(t, c, "app/config", "v3")
	f.until(t, "an event for v3", func(ServiceState) bool { return len(f.events) >= 2 })
	if got := readFile(t, dest); got != "value=v3\n" {
		t.Fatalf("file %q", got)
	}
	if len(f.events) != 2 || renders(f.sd, 0) != 3 {
		t.Fatalf("%d events, %d writes after 3 distinct values; want 2 and 3", len(f.events), renders(f.sd, 0))
	}
}

// TestMissingKeyBlocks: a template missing data is not ready, says which
// key it waits for, and renders once the key exists.
func TestMissingKeyBlocks(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	dir := t.TempDir()
	svc := templateService(dir, "web", `{{ key "app/missing" }}`)
	f := follow(m.Service(svc))

	want := `waiting: template web-a.conf needs key "app/missing"`
	st := f.until(t, "the missing key named", func(s ServiceState) bool { return s.Waiting == want })
	if st.TemplatesReady || st.Ready() {
		t.Fatalf("ready while the key is missing: %+v", st)
	}
	if _, err := os.Stat(svc.Templates[0].Destination); !os.IsNotExist(err) {
		t.Fatalf("destination written before its data exists: %v", err)
	}
	put(t, c, "app/missing", "here")
	f.until(t, "render", func(s ServiceState) bool { return s.TemplatesReady && s.Waiting == "" })
	if got := readFile(t, svc.Templates[0].Destination); got != "here" {
		t.Fatalf("file %q", got)
	}
}

// TestRenderErrorKeepsLastGoodFile: an error is reported and the last good
// file stays; fixing the data clears the error.
func TestRenderErrorKeepsLastGoodFile(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "app/json", `{"port": 8080}`)
	dir := t.TempDir()
	svc := templateService(dir, "web", `{{ with $d := key "app/json" | parseJSON }}port={{ $d.port }}{{ end }}`)
	dest := svc.Templates[0].Destination
	f := follow(m.Service(svc))
	f.until(t, "render", func(s ServiceState) bool { return s.TemplatesReady })

	put(t, c, "app/json", `{not json`)
	st := f.until(t, "the error", func(s ServiceState) bool { return len(s.Errors) > 0 })
	if !strings.Contains(st.Errors[0], "template web-a.conf") || !strings.Contains(st.Errors[0], "parseJSON") {
		t.Fatalf("error does not say which template and what: %q", st.Errors[0])
	}
	if !st.TemplatesReady {
		t.Fatal("a template that rendered once stays ready")
	}
	if got := readFile(t, dest); got != "port=8080" {
		t.Fatalf("file %q; want the last good one", got)
	}
	put(t, c, "app/json", `{"port": 9090}`)
	f.until(t, "recovery", func(s ServiceState) bool { return len(s.Errors) == 0 && len(f.events) == 1 })
	if got := readFile(t, dest); got != "port=9090" {
		t.Fatalf("file %q", got)
	}
}

// TestSandboxErrorBlocksStart: a template that tries to leave its sandbox
// never renders and says why.
func TestSandboxErrorBlocksStart(t *testing.T) {
	dir := t.TempDir()
	m := startManager(t, "127.0.0.1:1") // no Consul needed
	svc := templateService(dir, "web", `{{ file "../../etc/passwd" }}`, `{{ plugin "evil" }}`)
	f := follow(m.Service(svc))
	st := f.until(t, "both errors", func(s ServiceState) bool { return len(s.Errors) == 2 })
	if st.TemplatesReady {
		t.Fatal("ready")
	}
	if !strings.Contains(st.Errors[0], "outside the service directory") || !strings.Contains(st.Errors[1], `"plugin" is not available`) {
		t.Fatalf("errors %q", st.Errors)
	}
	if !strings.HasPrefix(st.Waiting, "waiting: template web-a.conf") {
		t.Fatalf("waiting %q", st.Waiting)
	}
}

// TestQuiescence: 50 rapid KV writes with wait produce one render.
func TestQuiescence(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "app/counter", "start")
	dir := t.TempDir()
	svc := templateService(dir, "web", `{{ key "app/counter" }}`)
	svc.Templates[0].WaitMin = 500 * time.Millisecond
	svc.Templates[0].WaitMax = 20 * time.Second
	f := follow(m.Service(svc))
	f.until(t, "first render (not delayed by wait)", func(s ServiceState) bool { return s.TemplatesReady })

	for i := range 50 {
		put(t, c, "app/counter", fmt.Sprint(i))
	}
	f.until(t, "the render", func(ServiceState) bool { return len(f.events) > 0 })
	if got := readFile(t, svc.Templates[0].Destination); got != "49" {
		t.Fatalf("rendered %q; want the last value", got)
	}
	if n := renders(f.sd, 0); n != 2 {
		t.Fatalf("%d writes; want 2 (first render, then one for the 50 writes)", n)
	}
}

// TestEnvTemplate: env = true templates feed the environment.
func TestEnvTemplate(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "api/motd", "hi there")
	dir := t.TempDir()
	svc := templateService(dir, "api", "# env\nMOTD={{ key \"api/motd\" }}\nMODE={{ keyOrDefault \"api/mode\" \"safe\" }}\n")
	svc.Templates[0].Env = true
	f := follow(m.Service(svc))
	st := f.until(t, "env", func(s ServiceState) bool { return s.TemplatesReady })
	if want := []string{"MOTD=hi there", "MODE=safe"}; !equalStrings(st.TemplateEnv, want) {
		t.Fatalf("env %q; want %q", st.TemplateEnv, want)
	}
	put(t, c, "api/mode", "fast")
	st = f.until(t, "env change", func(s ServiceState) bool { return len(f.events) == 1 })
	if want := []string{"MOTD=hi there", "MODE=fast"}; !equalStrings(st.TemplateEnv, want) {
		t.Fatalf("env %q; want %q", st.TemplateEnv, want)
	}
}

func register(t testing.TB, c *api.Client, id, name, addr string, port int, status string, tags ...string) {
	t.Helper()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: name, Address: addr, Port: port, Tags: tags,
		Check: &api.AgentServiceCheck{CheckID: id + ":ttl", TTL: "1h", Status: status},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func setTTL(t testing.TB, c *api.Client, id, status string) {
	t.Helper()
	if err := c.Agent().UpdateTTL(id+":ttl", "", status); err != nil {
		t.Fatal(err)
	}
}

// TestDependencyGates: counts up and down, exact messages, env variables.
func TestDependencyGates(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	svc := &schema.Service{Name: "web", Depends: []*schema.Dependency{
		{Name: "db", Service: "mysql", Tag: "primary", Passing: 2, OnLost: "restart", EnvPrefix: "DB"},
		{Name: "cache", Service: "redis", Registered: 1, OnLost: "ignore"}, // prefix derived: CACHE
	}}
	f := follow(m.Service(svc))
	waiting := func(w string) func(ServiceState) bool {
		return func(s ServiceState) bool { return s.Waiting == w }
	}
	f.until(t, "no mysql", waiting("waiting: db needs 2 passing mysql (tag primary), has 0"))

	register(t, c, "mysql-1", "mysql", "10.0.0.1", 3306, "passing", "primary")
	register(t, c, "mysql-x", "mysql", "10.0.0.9", 3306, "passing") // no tag: does not count
	f.until(t, "one mysql", waiting("waiting: db needs 2 passing mysql (tag primary), has 1"))
	register(t, c, "mysql-2", "mysql", "", 3307, "critical", "primary")
	register(t, c, "redis-1", "redis", "", 6379, "critical")
	st := f.until(t, "cache registered", func(s ServiceState) bool { return len(s.Deps) == 2 && s.Deps[1].Satisfied })
	if st.Waiting != "waiting: db needs 2 passing mysql (tag primary), has 1" || st.DepsSatisfied {
		t.Fatalf("a critical mysql counted as passing: %+v", st)
	}

	setTTL(t, c, "mysql-2", "pass")
	st = f.until(t, "both satisfied", func(s ServiceState) bool { return s.DepsSatisfied })
	if st.Waiting != "" {
		t.Fatalf("waiting %q while satisfied", st.Waiting)
	}
	wantEnv := []string{
		"DB_ADDR=10.0.0.1:3306", "DB_ADDRS=10.0.0.1:3306,127.0.0.1:3307", "DB_HOST=10.0.0.1", "DB_PORT=3306",
		"CACHE_ADDR=127.0.0.1:6379", "CACHE_ADDRS=127.0.0.1:6379", "CACHE_HOST=127.0.0.1", "CACHE_PORT=6379",
	}
	if !equalStrings(st.DepEnv, wantEnv) {
		t.Fatalf("env\n got %q\nwant %q", st.DepEnv, wantEnv)
	}

	// Lost: the supervisor sees which dependency and its on_lost.
	setTTL(t, c, "mysql-1", "fail")
	st = f.until(t, "db lost", func(s ServiceState) bool { return !s.DepsSatisfied })
	if st.Waiting != "waiting: db needs 2 passing mysql (tag primary), has 1" || st.Deps[0].Satisfied || st.Deps[0].Dep.OnLost != "restart" {
		t.Fatalf("after loss: %+v", st)
	}
	if want := "DB_ADDRS=127.0.0.1:3307"; st.DepEnv[1] != want {
		t.Fatalf("env %q; want %q (passing instances only)", st.DepEnv[1], want)
	}
	setTTL(t, c, "mysql-1", "pass")
	f.until(t, "db back", func(s ServiceState) bool { return s.DepsSatisfied })

	if err := c.Agent().ServiceDeregister("redis-1"); err != nil {
		t.Fatal(err)
	}
	f.until(t, "cache gone", waiting("waiting: cache needs 1 registered redis, has 0"))
}

// countingProxy passes requests to a real agent and counts them by path.
type countingProxy struct {
	mu       sync.Mutex
	inflight map[string]int
	total    map[string]int
}

func newCountingProxy(t *testing.T, target string) (*countingProxy, string) {
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &countingProxy{inflight: map[string]int{}, total: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.inflight[r.URL.Path]++
		p.total[r.URL.Path]++
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.inflight[r.URL.Path]--
			p.mu.Unlock()
		}()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return p, strings.TrimPrefix(srv.URL, "http://")
}

func (p *countingProxy) snapshot() (inflight, total map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	inflight, total = map[string]int{}, map[string]int{}
	for k, v := range p.inflight {
		if v != 0 {
			inflight[k] = v
		}
	}
	for k, v := range p.total {
		total[k] = v
	}
	return inflight, total
}

// TestOneQueryPerDistinctDependency: 20 services reading the same key and
// depending on the same service run two blocking queries, not 40 or 60.
func TestOneQueryPerDistinctDependency(t *testing.T) {
	a, c := newAgent(t)
	proxy, addr := newCountingProxy(t, a.HTTPAddr())
	m := startManager(t, addr, Options{BlockWait: 2 * time.Second})
	put(t, c, "shared/k", "one")
	register(t, c, "mysql-1", "mysql", "10.0.0.1", 3306, "passing", "primary")

	dir := t.TempDir()
	var svcs []*schema.Service
	var fs []*follower
	for i := range 20 {
		svc := templateService(dir, fmt.Sprintf("s%d", i),
			`{{ key "shared/k" }} {{ range service "primary.mysql" }}{{ .Address }}{{ end }}`)
		svc.Depends = []*schema.Dependency{{Name: "db", Service: "mysql", Tag: "primary", Passing: 1}}
		svcs = append(svcs, svc)
		fs = append(fs, follow(m.Service(svc)))
	}
	for _, f := range fs {
		f.until(t, "ready", func(s ServiceState) bool { return s.Ready() })
	}
	if n := m.Watching(); n != 2 {
		t.Fatalf("%d distinct queries; want 2 (the key, and primary.mysql shared by gates and templates)", n)
	}
	var inflight, total map[string]int
	if !consultest.WaitFor(10*time.Second, func() bool {
		inflight, _ = proxy.snapshot()
		return len(inflight) == 2 && inflight["/v1/kv/shared/k"] == 1 && inflight["/v1/health/service/mysql"] == 1
	}) {
		t.Fatalf("blocking queries in flight: %v; want one per distinct dependency", inflight)
	}
	_, before := proxy.snapshot()
	put(t, c, "shared/k", "two")
	for _, f := range fs {
		f.until(t, "the change", func(ServiceState) bool { return len(f.events) == 1 })
	}
	_, total = proxy.snapshot()
	if d := total["/v1/kv/shared/k"] - before["/v1/kv/shared/k"]; d > 4 {
		t.Fatalf("one KV change cost %d requests for 20 readers; want about one", d)
	}
	for _, svc := range svcs {
		m.Remove(svc)
	}
	if n := m.Watching(); n != 0 {
		t.Fatalf("%d queries after every service was removed", n)
	}
	if !consultest.WaitFor(10*time.Second, func() bool { inflight, _ = proxy.snapshot(); return len(inflight) == 0 }) {
		t.Fatalf("queries still in flight after removal: %v", inflight)
	}
}

// TestAgentRestart: the agent going away and coming back empty; rendering
// and gates resume without panics or tight loops.
func TestAgentRestart(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "app/k", "before")
	register(t, c, "mysql-1", "mysql", "", 3306, "passing")
	dir := t.TempDir()
	svc := templateService(dir, "web", `{{ key "app/k" }}`)
	svc.Depends = []*schema.Dependency{{Name: "mysql", Passing: 1}}
	f := follow(m.Service(svc))
	f.until(t, "ready", func(s ServiceState) bool { return s.Ready() })

	a.Kill()
	a.Start(t) // a dev agent comes back empty
	c = a.Client(t)
	f.until(t, "the dependency gone with the agent's state", func(s ServiceState) bool { return !s.DepsSatisfied })
	put(t, c, "app/k", "after")
	register(t, c, "mysql-1", "mysql", "", 3306, "passing")
	f.until(t, "recovered", func(s ServiceState) bool {
		return s.DepsSatisfied && len(f.events) == 1
	})
	if got := readFile(t, svc.Templates[0].Destination); got != "after" {
		t.Fatalf("file %q", got)
	}
}

// TestHashesFollowOutput: a template's hash names its output, whatever the
// destination, so instances that rendered the same data agree on it (the
// key of coordinated reloads); a change of the output changes it.
func TestHashesFollowOutput(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "app/config", "v1")
	one := follow(m.Service(templateService(t.TempDir(), "one", "value={{ key \"app/config\" }}\n", "static\n")))
	two := follow(m.Service(templateService(t.TempDir(), "two", "value={{ key \"app/config\" }}\n")))
	s1 := one.until(t, "one rendered", func(s ServiceState) bool { return s.TemplatesReady })
	s2 := two.until(t, "two rendered", func(s ServiceState) bool { return s.TemplatesReady })
	if len(s1.Hashes) != 2 || len(s2.Hashes) != 1 || s1.Hashes[0] == "" || s1.Hashes[0] != s2.Hashes[0] || s1.Hashes[1] == s1.Hashes[0] {
		t.Fatalf("hashes %q and %q: want one per template, equal for equal outputs", s1.Hashes, s2.Hashes)
	}
	put(t, c, "app/config", "v2")
	s1 = one.until(t, "one re-rendered", func(ServiceState) bool { return len(one.events) == 1 })
	if s1.Hashes[0] == s2.Hashes[0] {
		t.Fatalf("hash %q unchanged after the output changed", s1.Hashes[0])
	}
}

// TestReadersShareData: the instances of a unit in two slots of one node
// share its data, each through a reader of its own: both see every change,
// and one of them going away leaves the other's renders going. A service
// whose file another one already wrote (the same destination: two nodes of
// a test fleet on one machine) still sees its own output change.
func TestReadersShareData(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	put(t, c, "app/config", "v1")
	dir := t.TempDir()
	svc := templateService(dir, "web", "value={{ key \"app/config\" }}\n")
	r1 := &follower{sd: m.Service(svc)}
	r2 := &follower{sd: m.Service(svc)}
	one, two := r1.sd.Reader(), r2.sd.Reader()
	other := follow(m.Service(templateService(dir, "web", "value={{ key \"app/config\" }}\n"))) // same file, another service
	other.until(t, "the other rendered", func(s ServiceState) bool { return s.TemplatesReady })
	events := func(rd *Reader) int {
		n := 0
		deadline := time.After(30 * time.Second)
		for {
			n += len(rd.State().Events)
			if n > 0 {
				return n
			}
			select {
			case <-rd.Changed():
			case <-deadline:
				return 0
			}
		}
	}
	put(t, c, "app/config", "v2")
	if n1, n2 := events(one), events(two); n1 != 1 || n2 != 1 {
		t.Fatalf("events: %d and %d, want one each", n1, n2)
	}
	other.until(t, "the other's event although the file held its output already", func(ServiceState) bool { return len(other.events) == 1 })

	// One instance goes: the other reads on.
	one.Close()
	m.Remove(svc)
	put(t, c, "app/config", "v3")
	if n := events(two); n != 1 {
		t.Fatalf("after the first reader left: %d events", n)
	}
	if got := readFile(t, svc.Templates[0].Destination); got != "value=v3\n" {
		t.Fatalf("file %q", got)
	}
}

// TestFirstRenderAfterUpgrade: after an upgrade in place, a first render
// that changes the file the previous build wrote is an event (the data
// changed during the exec, and the service runs on); one that finds the
// file as it renders it is not, and neither is a first render of a file
// that did not exist.
func TestFirstRenderAfterUpgrade(t *testing.T) {
	a, c := newAgent(t)
	put(t, c, "app/config", "v2")
	for _, tc := range []struct {
		name, onDisk string // "": no file
		upgrade      bool
		events       int
	}{
		{"changed meanwhile", "value=v1\n", true, 1},
		{"unchanged", "value=v2\n", true, 0},
		{"no file before", "", true, 0},
		{"not an upgrade", "value=v1\n", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startManager(t, a.HTTPAddr(), Options{AfterUpgrade: tc.upgrade})
			dir := t.TempDir()
			svc := templateService(dir, "web", "value={{ key \"app/config\" }}\n")
			if tc.onDisk != "" {
				if err := os.WriteFile(svc.Templates[0].Destination, []byte(tc.onDisk), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f := follow(m.Service(svc))
			f.until(t, "first render", func(s ServiceState) bool { return s.TemplatesReady })
			if got := readFile(t, svc.Templates[0].Destination); got != "value=v2\n" {
				t.Fatalf("file %q", got)
			}
			if len(f.events) != tc.events {
				t.Fatalf("%d events, want %d", len(f.events), tc.events)
			}
		})
	}
}
