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

	"github.com/mariposa-sh/mariposa/internal/consultest"
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
	var rows []InstanceStatus
	if !consultest.WaitFor(20*time.Second, func() bool {
		rows = nil
		_ = json.Unmarshal([]byte(run("-json")), &rows)
		return len(rows) == 2 && rows[0].State == "completed" && rows[1].State == "running"
	}) {
		t.Fatalf("rows: %+v", rows)
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
	if !strings.Contains(ui.ErrorWriter.String(), "mariposa status:") {
		t.Errorf("error output: %q", ui.ErrorWriter.String())
	}
}
