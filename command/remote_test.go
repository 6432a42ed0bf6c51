package command

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/logring"
	"github.com/mariposa-sh/mariposa/nodeapi"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// remoteFleet is a real Consul agent whose catalog holds nodes as the
// pages show them, one of them (node-2) with a real node HTTP API in front
// of a fake supervisor:
//
//	node-2  mariposa with its API
//	node-3  mariposa with its API off
//	node-4  no mariposa
//	node-5  mariposa whose API does not answer
//	node-6  mariposa whose registered API is node-2's (another node's)
//	node-7  a remote node whose API listens on loopback only
type remoteFleet struct {
	agent  *consultest.Agent
	consul []string // -consul-addr ...
	target *fakeTarget
	logs   *logring.Set
	api    string // node-2's API
	dead   string // node-5's
}

func newRemoteFleet(t *testing.T, acl bool) *remoteFleet {
	t.Helper()
	agent := consultest.NewDev(t, consultest.Options{ACL: acl})
	c := agent.Client(t)
	f := &remoteFleet{agent: agent, consul: []string{"-consul-addr", agent.HTTPAddr()}, target: &fakeTarget{},
		logs: logring.NewSet(1000, 64<<10)}
	cfg := nodeapi.Config{Addr: "127.0.0.1:0", Node: func() string { return "node-2" },
		Snapshots: func() []supervisor.Snapshot { return nil }, Events: nodeapi.NewEventLog(10),
		Target: f.target, Logs: f.logs}
	if acl {
		cfg.Auth = nodeapi.NewAuthorizer(&nodeapi.ConsulChecker{BaseURL: "http://" + agent.HTTPAddr()}, 0, 0)
	}
	srv, err := nodeapi.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Close() })
	f.api = "http://" + srv.Addr()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.dead = "http://" + l.Addr().String()
	l.Close()

	reg := func(node, addr string, svc *api.AgentService) {
		t.Helper()
		r := &api.CatalogRegistration{Node: node, Address: addr, Service: svc}
		if _, err := c.Catalog().Register(r, nil); err != nil {
			t.Fatal(err)
		}
	}
	self := func(node, url string) *api.AgentService {
		s := &api.AgentService{ID: "mariposa-" + node, Service: "mariposa", Meta: map[string]string{}}
		if url != "" {
			s.Meta[supervisor.HTTPAPIMetaKey] = url
			_, p, _ := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
			fmt.Sscan(p, &s.Port)
			s.Address = "127.0.0.1"
		}
		return s
	}
	reg("node-2", "127.0.0.1", self("node-2", f.api))
	reg("node-3", "127.0.0.1", self("node-3", ""))
	reg("node-4", "127.0.0.1", &api.AgentService{ID: "web", Service: "web"})
	reg("node-5", "127.0.0.1", self("node-5", f.dead))
	reg("node-6", "127.0.0.1", self("node-6", f.api))
	reg("node-7", "10.0.0.7", self("node-7", f.api))
	return f
}

// run runs cmd with the fleet's Consul flags and args.
func (f *remoteFleet) run(cmd interface{ Run([]string) int }, args ...string) int {
	return cmd.Run(append(append([]string{}, f.consul...), args...))
}

func commandPage(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../website/commands/" + name + ".md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// shows fails unless page shows "$ mariposa ARGS" followed by out.
func shows(t *testing.T, page, name, args, out string) {
	t.Helper()
	if want := "$ mariposa " + name + " " + args + "\n" + out; !strings.Contains(commandPage(t, page), want) {
		t.Errorf("%s.md does not show what it prints:\n%s", page, want)
	}
}

// TestRemoteCommands: logs, restart and reset -node NODE find the node's
// mariposa in Consul's catalog and act through its HTTP API, and say
// clearly why they cannot: an unknown node, no mariposa there, its API
// off, not answering, or another node's. What they print is what their
// pages show.
func TestRemoteCommands(t *testing.T) {
	f := newRemoteFleet(t, false)
	for i := 1; i <= 1500; i++ {
		f.logs.Get("web").Add(logring.Line{Stream: "stdout", Text: fmt.Sprintf("GET /health 200 (%d)", i)})
	}
	f.logs.Get("web").Add(logring.Line{Stream: "stderr", Text: "warning: cache dir missing, using /tmp"})
	f.logs.Get("web").Add(logring.Line{Stream: "stdout", Text: "GET /health 200"})

	// The last lines, and the ring's bound.
	ui := cli.NewMockUi()
	if code := f.run(&LogsCommand{UI: ui}, "-node", "node-2", "-n", "3", "web"); code != 0 {
		t.Fatalf("logs: exit %d: %s", code, ui.ErrorWriter.String())
	}
	shows(t, "logs", "logs", "-node node-2 -n 3 web", ui.OutputWriter.String())
	if got := ui.OutputWriter.String(); got != "GET /health 200 (1500)\n[stderr] warning: cache dir missing, using /tmp\nGET /health 200\n" {
		t.Errorf("logs -n 3: %q", got)
	}
	ui = cli.NewMockUi()
	if code := f.run(&LogsCommand{UI: ui}, "-node", "node-2", "-n", "100000", "web"); code != 0 {
		t.Fatalf("logs: exit %d: %s", code, ui.ErrorWriter.String())
	}
	// The ring keeps at most 1,000 lines and 64 KiB: the newest ones.
	lines := strings.Split(strings.TrimSpace(ui.OutputWriter.String()), "\n")
	if n := len(lines); n > 1000 || n < 500 || lines[n-1] != "GET /health 200" || lines[0] != fmt.Sprintf("GET /health 200 (%d)", 1500-n+3) {
		t.Errorf("logs -n 100000: %d lines, from %q to %q; want the newest of 1502, at most 1000", n, lines[0], lines[n-1])
	}

	// Restart and reset, told who asked.
	ui = cli.NewMockUi()
	if code := f.run(&RestartCommand{UI: ui}, "-node", "node-2", "web"); code != 0 {
		t.Fatalf("restart: exit %d: %s", code, ui.ErrorWriter.String())
	}
	shows(t, "restart", "restart", "-node node-2 web", ui.OutputWriter.String())
	ui = cli.NewMockUi()
	if code := f.run(&ResetCommand{UI: ui}, "worker", "-node", "node-2"); code != 0 {
		t.Fatalf("reset: exit %d: %s", code, ui.ErrorWriter.String())
	}
	shows(t, "reset", "reset", "-node node-2 worker", ui.OutputWriter.String())
	if got := f.target.Calls(); !slices.Equal(got, []string{"restart web", "reset worker"}) {
		t.Fatalf("calls %q", got)
	}
	for _, by := range f.target.Actors() {
		if !strings.HasPrefix(by, "http remote=127.0.0.1:") {
			t.Errorf("actor %q, want the HTTP caller", by)
		}
	}

	// Why not.
	for _, c := range []struct {
		page string
		cmd  interface{ Run([]string) int }
		args []string
		want string
		show bool // the page shows it as it is
	}{
		{"logs", &LogsCommand{}, []string{"-node", "node-9", "web"},
			`mariposa logs: no node "node-9" in Consul's catalog (mariposa runs on node-2, node-3, node-5, node-6, node-7)`, true},
		{"logs", &LogsCommand{}, []string{"-node", "node-4", "web"},
			`mariposa logs: node node-4 runs no mariposa (no "mariposa" service is registered there): is ` + "`mariposa run`" + ` running on it?`, true},
		{"reset", &ResetCommand{}, []string{"-node", "node-3", "worker"},
			`mariposa reset: node node-3's mariposa runs with its HTTP API off (-http-addr off, or its default address 127.0.0.1:8585 was taken): run it with -http-addr ADDR to reach it (-http-addr 0.0.0.0:8585 from other machines)`, true},
		{"restart", &RestartCommand{}, []string{"-node", "node-2", "nope"},
			`mariposa restart: no service "nope" on node node-2 (services: web, worker)`, false},
		{"restart", &RestartCommand{}, []string{"-node", "node-5", "web"},
			"mariposa restart: cannot reach node node-5's mariposa at " + f.dead + ": dial tcp " + strings.TrimPrefix(f.dead, "http://") +
				": connect: connection refused; is mariposa running there, and may this machine reach that address?", false},
		{"restart", &RestartCommand{}, []string{"-node", "node-6", "web"},
			"mariposa restart: another mariposa than node node-6's answered at " + f.api + "; the address in its registration leads elsewhere", false},
		{"restart", &RestartCommand{}, []string{"-node", "node-7", "web"},
			"mariposa restart: another mariposa than node node-7's answered at " + f.api + "; its HTTP API listens on loopback (" + f.api +
				"), which only node node-7 itself reaches: run mariposa there with -http-addr set to an address this machine reaches (0.0.0.0:8585 for every interface)", false},
		{"restart", &RestartCommand{}, []string{"-node", "node-2", "-control-socket", "/tmp/x.sock", "web"},
			"mariposa restart: give -node or -control-socket, not both", false},
	} {
		ui := cli.NewMockUi()
		switch c := c.cmd.(type) {
		case *LogsCommand:
			c.UI = ui
		case *RestartCommand:
			c.UI = ui
		case *ResetCommand:
			c.UI = ui
		}
		if code := f.run(c.cmd, c.args...); code != 1 {
			t.Errorf("%s %q: exit %d, want 1", c.page, c.args, code)
		}
		if got := strings.TrimSpace(ui.ErrorWriter.String()); got != c.want {
			t.Errorf("%s %q:\n got %s\nwant %s", c.page, c.args, got, c.want)
		}
		if c.show && !strings.Contains(commandPage(t, c.page), "\n"+c.want+"\n") {
			t.Errorf("%s.md does not show:\n%s", c.page, c.want)
		}
	}
	if got := f.target.Calls(); len(got) != 2 {
		t.Fatalf("a refused request reached the supervisor: %q", got)
	}
}

// TestRemoteLogsFollow: logs -f -node streams the node's new lines as they
// come, until interrupted.
func TestRemoteLogsFollow(t *testing.T) {
	f := newRemoteFleet(t, false)
	r := f.logs.Get("web")
	r.Add(logring.Line{Stream: "stdout", Text: "old"})
	ui := cli.NewMockUi()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- f.run(&LogsCommand{UI: ui, Context: ctx}, "-node", "node-2", "-f", "-n", "1", "web") }()
	wait := func(want string) {
		t.Helper()
		if !consultest.WaitFor(10*time.Second, func() bool { return ui.OutputWriter.String() == want }) {
			t.Fatalf("output %q, want %q (stderr %q)", ui.OutputWriter.String(), want, ui.ErrorWriter.String())
		}
	}
	wait("old\n")
	r.Add(logring.Line{Stream: "stdout", Text: "new 1"})
	wait("old\nnew 1\n")
	r.Add(logring.Line{Stream: "stderr", Text: "new 2"})
	wait("old\nnew 1\n[stderr] new 2\n")
	cancel()
	select {
	case code := <-done:
		if code != 0 || ui.ErrorWriter.String() != "" {
			t.Fatalf("exit %d, stderr %q", code, ui.ErrorWriter.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f -node did not stop")
	}
}

// ACL policies of TestRemoteCommandsACL.
const (
	// What finding a node's mariposa needs, as an anonymous token may
	// have it (a cluster whose catalog anyone may read).
	remoteCatalogPolicy = `
node_prefix "" {
  policy = "read"
}
service "mariposa" {
  policy = "read"
}
`
	remoteReaderPolicy = remoteCatalogPolicy + `
service "web" {
  policy = "read"
}
`
	remoteOperatorPolicy = remoteCatalogPolicy + `
service "web" {
  policy = "write"
}
`
)

// The AccessorIDs the pages show.
const (
	readerAccessor   = "0c8d3d7e-5c1a-4bd2-9a6f-7f1f6c2b9e41"
	operatorAccessor = "6a2f0e9b-3d4c-4e8a-b1f7-2c5d8e9a0b13"
)

// TestRemoteCommandsACL: with Consul's ACLs on, the commands send the
// operator's token and say which permission is missing: service:read for
// logs, service:write for restart and reset; an operator's restart names
// the token's AccessorID to the supervisor, never the token.
func TestRemoteCommandsACL(t *testing.T) {
	f := newRemoteFleet(t, true)
	root := f.agent.Client(t)
	token := func(name, accessor, rules string) string {
		pol, _, err := root.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := root.ACL().TokenCreate(&api.ACLToken{AccessorID: accessor, Description: name,
			Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok.SecretID
	}
	reader := token("reader", readerAccessor, remoteReaderPolicy)
	operator := token("operator", operatorAccessor, remoteOperatorPolicy)
	f.logs.Get("web").Add(logring.Line{Stream: "stdout", Text: "listening on :8080"})

	fail := func(cmd interface{ Run([]string) int }, ui *cli.MockUi, args ...string) string {
		t.Helper()
		if code := f.run(cmd, args...); code != 1 {
			t.Fatalf("%q: exit %d, want 1 (%s)", args, code, ui.OutputWriter.String())
		}
		return strings.TrimSpace(ui.ErrorWriter.String())
	}
	// Without a token, nothing of the catalog can be read.
	ui := cli.NewMockUi()
	got := fail(&LogsCommand{UI: ui}, ui, "-node", "node-2", "web")
	if want := `mariposa logs: no node "node-2" in Consul's catalog, or the token may not read it: finding a node's mariposa takes node:read on the node and service:read on "mariposa" (-token, -token-file or CONSUL_HTTP_TOKEN)`; got != want {
		t.Errorf("no token:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(commandPage(t, "logs"), "\n"+got+"\n") {
		t.Errorf("logs.md does not show:\n%s", got)
	}
	ui = cli.NewMockUi()
	if got, want := fail(&LogsCommand{UI: ui}, ui, "-node", "node-2", "-token", "00000000-0000-0000-0000-00000000dead", "web"),
		`mariposa logs: the token is unknown to Consul (ACL not found): give one it knows with -token, -token-file or CONSUL_HTTP_TOKEN`; got != want {
		t.Errorf("unknown token:\n got %s\nwant %s", got, want)
	}

	// A reader reads the logs (CONSUL_HTTP_TOKEN as the consul CLI has
	// it), and may not restart.
	t.Setenv("CONSUL_HTTP_TOKEN", reader)
	ui = cli.NewMockUi()
	if code := f.run(&LogsCommand{UI: ui}, "-node", "node-2", "web"); code != 0 || ui.OutputWriter.String() != "listening on :8080\n" {
		t.Fatalf("reader's logs: exit %d %q %s", code, ui.OutputWriter.String(), ui.ErrorWriter.String())
	}
	ui = cli.NewMockUi()
	got = fail(&RestartCommand{UI: ui}, ui, "-node", "node-2", "web")
	if want := `mariposa restart: node node-2's mariposa refused: Permission denied: token with AccessorID "` + readerAccessor + `" lacks service:write on "web"`; got != want {
		t.Errorf("reader's restart:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(commandPage(t, "restart"), "\n"+got+"\n") {
		t.Errorf("restart.md does not show:\n%s", got)
	}
	ui = cli.NewMockUi()
	if got, want := fail(&LogsCommand{UI: ui}, ui, "-node", "node-2", "db"),
		`mariposa logs: node node-2's mariposa refused: Permission denied: token with AccessorID "`+readerAccessor+`" lacks service:read on "db"`; got != want {
		t.Errorf("reader's logs of db:\n got %s\nwant %s", got, want)
	}
	if calls := f.target.Calls(); len(calls) != 0 {
		t.Fatalf("a refused restart reached the supervisor: %q", calls)
	}

	// An operator restarts, with -token over the environment; the
	// supervisor is told the AccessorID.
	ui = cli.NewMockUi()
	if code := f.run(&RestartCommand{UI: ui}, "-node", "node-2", "-token", operator, "web"); code != 0 {
		t.Fatalf("operator's restart: exit %d %s", code, ui.ErrorWriter.String())
	}
	actors := f.target.Actors()
	if len(actors) != 1 || !strings.HasPrefix(actors[0], "http accessor="+operatorAccessor+" remote=127.0.0.1:") || strings.Contains(actors[0], operator) {
		t.Errorf("actors %q", actors)
	}

	// A cluster that lets anyone read its catalog: the node's API itself
	// asks for a token.
	pol, _, err := root.ACL().PolicyCreate(&api.ACLPolicy{Name: "anonymous-catalog", Rules: remoteCatalogPolicy}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := root.ACL().TokenUpdate(&api.ACLToken{AccessorID: "00000000-0000-0000-0000-000000000002",
		Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	ui = cli.NewMockUi()
	if got, want := fail(&ResetCommand{UI: ui}, ui, "-node", "node-2", "web"),
		`mariposa reset: node node-2's mariposa needs a Consul ACL token (Consul's ACLs are on): give one with service:write on "web" (-token, -token-file or CONSUL_HTTP_TOKEN)`; got != want {
		t.Errorf("anonymous reset:\n got %s\nwant %s", got, want)
	}
}

// findNodeAPI reads the API's URL from mariposa's registration: one that
// listens on every interface is reached at the node's address; without
// meta, the service's address and port.
func TestFindNodeAPI(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	for _, tc := range []struct {
		node, addr string
		svc        api.AgentService
		want       string
		loopback   bool
	}{
		{"a", "10.0.0.1", api.AgentService{Meta: map[string]string{"http_api": "http://0.0.0.0:8585"}, Port: 8585}, "http://10.0.0.1:8585", false},
		{"b", "10.0.0.2", api.AgentService{Meta: map[string]string{"http_api": "http://[::]:8585"}, Port: 8585, Address: "10.0.1.2"}, "http://10.0.1.2:8585", false},
		{"c", "10.0.0.3", api.AgentService{Meta: map[string]string{"http_api": "http://10.0.0.33:9000"}, Port: 9000, Address: "10.0.0.33"}, "http://10.0.0.33:9000", false},
		{"d", "10.0.0.4", api.AgentService{Port: 8585}, "http://10.0.0.4:8585", false},
		{"e", "fd00::5", api.AgentService{Meta: map[string]string{"http_api": "http://0.0.0.0:8585"}}, "http://[fd00::5]:8585", false},
		{"f", "10.0.0.6", api.AgentService{Meta: map[string]string{"http_api": "http://127.0.0.1:8585"}, Address: "127.0.0.1", Port: 8585}, "http://127.0.0.1:8585", true},
		{"g", "127.0.0.1", api.AgentService{Meta: map[string]string{"http_api": "http://127.0.0.1:8585"}, Address: "127.0.0.1", Port: 8585}, "http://127.0.0.1:8585", false},
	} {
		svc := tc.svc
		svc.ID, svc.Service = "mariposa-"+tc.node, "mariposa"
		if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: tc.node, Address: tc.addr, Service: &svc}, nil); err != nil {
			t.Fatal(err)
		}
		rn, err := findNodeAPI(context.Background(), c, tc.node)
		if err != nil || rn.url != tc.want || rn.loopback != tc.loopback {
			t.Errorf("node %s: %+v %v; want %s, loopback %v", tc.node, rn, err, tc.want, tc.loopback)
		}
	}
}
