package command

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/report"
	"github.com/mariposa-sh/mariposa/schema"
	"github.com/mariposa-sh/mariposa/supervisor"
)

func TestStatus(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "s.hcl")
	if err := os.WriteFile(p, []byte(`
service "web" {
  command = ["sleep", "600"]
  version = "1.4.2"
  port    = 8080
}

service "job" {
  command = ["sh", "-c", "exit 0"]
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := schema.Load([]string{p}, schema.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	// A service mariposa does not manage is not listed.
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "other", Name: "other"}); err != nil {
		t.Fatal(err)
	}
	r := supervisor.New(cfg, supervisor.Options{Client: c})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	run := func(args ...string) string {
		ui := cli.NewMockUi()
		cmd := &StatusCommand{UI: ui}
		if code := cmd.Run(append([]string{"-consul-addr", agent.HTTPAddr()}, args...)); code != 0 {
			t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
		}
		return ui.OutputWriter.String()
	}
	var out StatusOutput
	if !consultest.WaitFor(20*time.Second, func() bool {
		out = StatusOutput{}
		_ = json.Unmarshal([]byte(run("-json")), &out)
		return len(out.Instances) == 2 && out.Instances[0].State == "completed" && out.Instances[1].State == "running"
	}) {
		t.Fatalf("rows: %+v", out.Instances)
	}
	rows := out.Instances
	// No fleet: no units, and nothing that could not be read.
	if out.Units == nil || len(out.Units) != 0 || out.Problems != nil {
		t.Errorf("units %+v, problems %v", out.Units, out.Problems)
	}
	web := rows[1]
	if web.Service != "web" || web.Node != agent.Name || web.Version != "1.4.2" || web.Port != 8080 ||
		web.ServiceID != "web-"+agent.Name || !strings.HasPrefix(web.Detail, "running (pid ") || web.Health != "-" {
		t.Errorf("web row: %+v", web)
	}
	if job := rows[0]; !strings.Contains(job.Detail, "completed (exit 0)") {
		t.Errorf("job row: %+v", job)
	}

	table := run()
	for _, want := range []string{"SERVICE", "web", agent.Name, "running", "1.4.2", "job", "completed"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "other") {
		t.Errorf("unmanaged service listed:\n%s", table)
	}
	if only := run("web"); strings.Contains(only, "job") || !strings.Contains(only, "web") {
		t.Errorf("status web:\n%s", only)
	}
}

func TestStatusNoAgent(t *testing.T) {
	ui := cli.NewMockUi()
	port := consultest.FreePorts(t, 1)[0]
	if code := (&StatusCommand{UI: ui}).Run([]string{"-consul-addr", "127.0.0.1:" + strconv.Itoa(port)}); code != 1 {
		t.Fatalf("exit %d with no agent", code)
	}
	if !strings.Contains(ui.ErrorWriter.String(), "mariposa status: cannot reach Consul's HTTP API at 127.0.0.1:"+strconv.Itoa(port)+" (from -consul-addr") {
		t.Errorf("error output: %q", ui.ErrorWriter.String())
	}
}

// The supervisor check's output carries the state as data: status shows it
// whole, with since when, in the table and in -json.
func TestStatusReport(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	since := time.Now().Add(-3*time.Minute - 10*time.Second).UTC().Truncate(time.Millisecond)
	reason := "restarting in 2s after exit 1, attempt 3/10; the child said: " +
		strings.Repeat("could not open /var/lib/app/data.db: permission denied; ", 3) + "END"
	id := "api-" + agent.Name
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: "api",
		Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue, "version": "2.0.0"},
		Check: &api.AgentServiceCheck{CheckID: checks.SupervisorCheckID(id), Name: "mariposa supervisor", TTL: "1m",
			// A change of status syncs at once; of output alone, only after check_update_interval.
			Status: api.HealthPassing},
	}); err != nil {
		t.Fatal(err)
	}
	out := report.Encode(report.Instance{State: "backoff", Restarts: 3, Reason: reason, Since: since,
		Until: since.Add(2 * time.Second), LastExit: "exit 1", Stderr: "permission denied", Role: "follower",
		Volumes: "restored from the copy of web-2 taken 7s before"})
	if err := c.Agent().UpdateTTL(checks.SupervisorCheckID(id), out, api.HealthCritical); err != nil {
		t.Fatal(err)
	}

	// The agent syncs the check's output to the catalog a moment later.
	var last string
	if !consultest.WaitFor(10*time.Second, func() bool {
		hcs, _, err := c.Health().Checks("api", nil)
		if err == nil && len(hcs) == 1 {
			last = hcs[0].Output
		}
		return err == nil && len(hcs) == 1 && hcs[0].Output == out
	}) {
		t.Fatalf("the check's output did not reach the catalog: %q", last)
	}
	ui := cli.NewMockUi()
	if code := (&StatusCommand{UI: ui}).Run([]string{"-consul-addr", agent.HTTPAddr(), "-json"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	var st StatusOutput
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &st); err != nil || len(st.Instances) != 1 {
		t.Fatalf("rows %+v (%v):\n%s", st.Instances, err, ui.OutputWriter.String())
	}
	r := st.Instances[0]
	if r.State != "backoff" || r.Detail != reason || !r.Since.Equal(since) || !r.Until.Equal(since.Add(2*time.Second)) ||
		r.Restarts != 3 || r.LastExit != "exit 1" || r.Stderr != "permission denied" || r.Volumes != "restored from the copy of web-2 taken 7s before" || r.Leader != "follower" ||
		r.Version != "2.0.0" {
		t.Errorf("row: %+v", r)
	}
	if !strings.Contains(ui.OutputWriter.String(), `"since": "`+since.Format(time.RFC3339Nano)+`"`) {
		t.Errorf("-json lacks the absolute since:\n%s", ui.OutputWriter.String())
	}

	ui = cli.NewMockUi()
	cmd := &StatusCommand{UI: ui, now: func() time.Time { return since.Add(3*time.Minute + 10*time.Second) }}
	if code := cmd.Run([]string{"-consul-addr", agent.HTTPAddr()}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	table := ui.OutputWriter.String()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "SINCE") {
		t.Fatalf("table:\n%s", table)
	}
	for _, want := range []string{"api", "backoff", "2.0.0", "follower", "3m ago", reason} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row lacks %q:\n%s", want, table)
		}
	}
}

// Rows from the supervisor check: the report when there is one, else the
// prose of an older mariposa; an instance whose mariposa is dead is lost.
func TestInstanceRow(t *testing.T) {
	since := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	long := strings.Repeat("x", 300)
	entry := func(status, output string, alive bool) *api.ServiceEntry {
		e := &api.ServiceEntry{Node: &api.Node{Node: "n1", Address: "10.0.0.1"},
			Service: &api.AgentService{ID: "web-n1", Service: "web", Meta: map[string]string{"leader": "leader"}},
			Checks:  api.HealthChecks{{CheckID: "web-n1:mariposa", ServiceID: "web-n1", Status: status, Output: output}}}
		if !alive {
			e.Checks = append(e.Checks, &api.HealthCheck{CheckID: "web-n1:mariposa-alive", ServiceID: "web-n1", Status: api.HealthCritical})
		}
		return e
	}
	cases := []struct {
		name               string
		e                  *api.ServiceEntry
		state, detail, led string
		since              time.Time
		pid                int
	}{
		{"report", entry(api.HealthPassing, report.Encode(report.Instance{State: "running", PID: 42, Reason: "running (pid 42) " + long, Since: since, Role: "follower"}), true),
			"running", "running (pid 42) " + long, "follower", since, 42},
		{"report failed", entry(api.HealthCritical, report.Encode(report.Instance{State: "failed", Reason: "failed: 10 restarts in 5m", Since: since}), true),
			"failed", "failed: 10 restarts in 5m", "leader", since, 0},
		{"older mariposa running", entry(api.HealthPassing, "running (pid 7)", true), "running", "running (pid 7)", "leader", time.Time{}, 0},
		{"older mariposa restarting", entry(api.HealthCritical, "restarting in 2s after exit 1, attempt 3/10", true),
			"backoff", "restarting in 2s after exit 1, attempt 3/10", "leader", time.Time{}, 0},
		{"older mariposa waiting", entry(api.HealthCritical, "waiting: db needs 1 passing", true), "waiting", "waiting: db needs 1 passing", "leader", time.Time{}, 0},
		{"garbage state line", entry(api.HealthCritical, "failed: x\n\nmariposa-state: {not json", true),
			"failed", "failed: x\n\nmariposa-state: {not json", "leader", time.Time{}, 0},
		{"lost", entry(api.HealthPassing, report.Encode(report.Instance{State: "running", Reason: "running (pid 9)", Since: since}), false),
			"lost", "the mariposa supervising it is not alive; last said: running (pid 9)", "leader", since, 0},
	}
	// A node whose agent is dead: its checks keep their last status, which
	// nobody updates: the instance is lost, its health unknown.
	dead := entry(api.HealthPassing, report.Encode(report.Instance{State: "running", Reason: "running (pid 9)", Since: since}), true)
	dead.Checks = append(dead.Checks, &api.HealthCheck{CheckID: "serfHealth", Status: api.HealthCritical, Output: "Agent not live or unreachable"},
		&api.HealthCheck{CheckID: "web-n1:http", ServiceID: "web-n1", Status: api.HealthPassing})
	cases = append(cases, struct {
		name               string
		e                  *api.ServiceEntry
		state, detail, led string
		since              time.Time
		pid                int
	}{"agent dead", dead, "lost", "node n1's Consul agent is not alive (serfHealth critical); last said: running (pid 9)", "leader", since, 0})
	if r := instanceRow(dead); r.Health != "unknown" {
		t.Errorf("agent dead: health %q, want unknown", r.Health)
	}
	alive := entry(api.HealthPassing, report.Encode(report.Instance{State: "running", Reason: "running (pid 9)", Since: since}), true)
	alive.Checks = append(alive.Checks, &api.HealthCheck{CheckID: "serfHealth", Status: api.HealthPassing},
		&api.HealthCheck{CheckID: "web-n1:http", ServiceID: "web-n1", Status: api.HealthPassing})
	if r := instanceRow(alive); r.State != "running" || r.Health != api.HealthPassing {
		t.Errorf("agent alive: %s %s", r.State, r.Health)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := instanceRow(tc.e)
			if r.State != tc.state || r.Detail != tc.detail || r.Leader != tc.led || !r.Since.Equal(tc.since) || r.PID != tc.pid {
				t.Errorf("got state %q detail %q leader %q since %v pid %d", r.State, r.Detail, r.Leader, r.Since, r.PID)
			}
			if table := statusTable([]InstanceStatus{r}, since.Add(time.Hour)); !strings.Contains(table, oneLine(tc.detail)) {
				t.Errorf("the table cuts the detail:\n%s", table)
			}
		})
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s ago"}, {12 * time.Second, "12s ago"}, {3*time.Minute + 59*time.Second, "3m ago"},
		{5 * time.Hour, "5h ago"}, {47 * time.Hour, "47h ago"}, {72 * time.Hour, "3d ago"}, {-5 * time.Second, "just now"},
	} {
		if got := ago(now.Add(-tc.d), now); got != tc.want {
			t.Errorf("ago(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
	if got := ago(time.Time{}, now); got != "-" {
		t.Errorf("ago(zero) = %q", got)
	}
}
