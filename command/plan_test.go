package command

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

const planV1 = `
service "api" {
  command = ["app", "-v1"]
  count   = 2
  env     = { MODE = "a" }
}

service "worker" {
  command = ["worker"]
  count   = 3
}
`

func TestPlan(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "shop.hcl")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string, string) {
		ui := cli.NewMockUi()
		code := (&PlanCommand{UI: ui}).Run(append([]string{"-consul-addr", agent.HTTPAddr()}, args...))
		return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
	}
	deployKeys := func() int {
		t.Helper()
		pairs, _, err := c.KV().List(cluster.DeployPrefix, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(pairs)
	}
	deploy := func() *cluster.Spec {
		t.Helper()
		cfg, diags := schema.Load([]string{file}, schema.LoadOptions{})
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		sp, err := cluster.Reify("default", cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.Deploy(c, sp, cluster.DeployOptions{By: "test"}); err != nil {
			t.Fatal(err)
		}
		return sp
	}

	// No deployment yet: everything is added, and nothing is written.
	write(planV1)
	code, out, errOut := run(file)
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "Deployment default has no spec yet; deploy would write spec 1 (") ||
		!strings.Contains(out, "\n+ api: count 2, 2 slots added: api/0, api/1\n\n+ worker: count 3, 3 slots added: worker/0, worker/1, worker/2\n") ||
		!strings.HasSuffix(out, "Plan: 2 units to add, 0 to change, 0 to remove; 5 slots added, 0 removed; 0 instances replaced.\n") {
		t.Fatalf("new: exit %d\n%s%s", code, out, errOut)
	}
	if n := deployKeys(); n != 0 {
		t.Fatalf("plan wrote %d keys", n)
	}

	// Deployed, then changed: the command and env of api, worker's count.
	v1 := deploy()
	write(strings.NewReplacer(`"-v1"`, `"-v2"`, `MODE = "a"`, `MODE = "b"`, "count   = 3", "count   = 4").Replace(planV1))
	code, out, errOut = run(file)
	want := `~ api
    ~ api.command: ["app", "-v1"] -> ["app", "-v2"]
    ~ api.env.MODE: "a" -> "b"
  replaces: every instance (api/0, api/1), in 2 batches of 1

~ worker
    ~ worker.count: 3 -> 4
  1 slot added: worker/3
  replaces: none (placement only)

Plan: 0 units to add, 2 to change, 0 to remove; 1 slot added, 0 removed; 2 instances replaced.
`
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "Deployment default is at spec 1 ("+v1.Hash+"); deploy would write spec 2 (") ||
		!strings.HasSuffix(out, "\n\n"+want) {
		t.Fatalf("changed: exit %d\n%s%s\nwant the end\n%s", code, out, errOut, want)
	}

	// -json: the same, as data.
	code, out, errOut = run("-json", file)
	if code != 0 || errOut != "" {
		t.Fatalf("-json: exit %d %s", code, errOut)
	}
	var p struct {
		Deployment string
		Current    *struct {
			N    uint64
			Hash string
		}
		Next struct {
			N    uint64
			Hash string
			Spec json.RawMessage
		}
		Changes bool
		Units   []struct {
			Unit, Change    string
			CountFrom       int `json:"count_from"`
			CountTo         int `json:"count_to"`
			Diffs           []struct{ Path, From, To any }
			SlotsAdded      int      `json:"slots_added"`
			SlotsRemoved    []string `json:"slots_removed"`
			Replace         string
			ReplaceServices []string `json:"replace_services"`
		}
		Warnings []string
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("-json: %v\n%s", err, out)
	}
	sp, err := cluster.DecodeSpec(p.Next.Spec)
	if err != nil || p.Deployment != "default" || p.Current == nil || p.Current.N != 1 || p.Current.Hash != v1.Hash ||
		p.Next.N != 2 || sp.Hash != p.Next.Hash || sp.N != 2 || len(sp.Services) != 2 || sp.Services[0].Command[1] != "-v2" ||
		!p.Changes || p.Warnings == nil || len(p.Warnings) != 0 {
		t.Fatalf("-json: %v\n%s", err, out)
	}
	if len(p.Units) != 2 || p.Units[0].Unit != "api" || p.Units[0].Change != "change" || p.Units[0].Replace != "all" ||
		len(p.Units[0].Diffs) != 2 || p.Units[0].Diffs[1].Path != "api.env.MODE" || p.Units[0].Diffs[1].From != "a" ||
		p.Units[0].Diffs[1].To != "b" || len(p.Units[0].ReplaceServices) != 1 ||
		p.Units[1].CountFrom != 3 || p.Units[1].CountTo != 4 || p.Units[1].SlotsAdded != 1 || p.Units[1].Replace != "none" ||
		p.Units[1].SlotsRemoved == nil {
		t.Fatalf("-json units:\n%s", out)
	}
	if n := deployKeys(); n != 3 { // spec/1, desired, state/1
		t.Fatalf("plan wrote: %d keys under deploy/", n)
	}

	// Identical: no changes, exit 0.
	write(planV1)
	code, out, errOut = run(file)
	if want := "No changes. Deployment default is at spec 1 (" + v1.Hash + ").\n"; code != 0 || out != want || errOut != "" {
		t.Fatalf("identical: exit %d %q %q, want %q", code, out, errOut, want)
	}
	code, out, _ = run("-json", file)
	if code != 0 || !strings.Contains(out, `"changes": false`) || !strings.Contains(out, `"change": "none"`) {
		t.Fatalf("identical -json: exit %d\n%s", code, out)
	}
	// Another deployment has no spec.
	if code, out, _ := run("-name", "other", file); code != 0 || !strings.HasPrefix(out, "Deployment other has no spec yet") {
		t.Fatalf("-name other: exit %d %q", code, out)
	}

	// Bad files: the schema's diagnostics, exit 1, nothing written.
	write(strings.Replace(planV1, "count   = 2", "count   = 2\n  port    = 70000", 1))
	code, out, errOut = run(file)
	if code != 1 || out != "" || !strings.Contains(errOut, "shop.hcl:5") || !strings.Contains(errOut, "Port out of range") {
		t.Fatalf("bad file: exit %d %q\n%s", code, out, errOut)
	}
	write("service \"plain\" {\n  command = [\"x\"]\n}\n")
	if code, out, errOut := run(file); code != 1 || out != "" || !strings.Contains(errOut, `mariposa plan: `+file+`: service "plain" has no count`) {
		t.Fatalf("no count: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(); code != 1 || !strings.Contains(errOut, "no service files given") || !strings.Contains(errOut, "Usage: mariposa plan") {
		t.Fatalf("no files: exit %d %q", code, errOut)
	}
	if n := deployKeys(); n != 3 { // spec/1, desired, state/1
		t.Fatalf("bad files wrote: %d keys under deploy/", n)
	}

	// A corrupt desired pointer is an error, not an empty deployment.
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.DesiredKey("broken"), Value: []byte("{oops")}, nil); err != nil {
		t.Fatal(err)
	}
	write(planV1)
	if code, out, errOut := run("-name", "broken", file); code != 1 || out != "" || !strings.Contains(errOut, "mariposa/deploy/broken/desired holds no desired spec") {
		t.Fatalf("corrupt desired: exit %d %q %q", code, out, errOut)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.DesiredKey("broken"), Value: []byte(`{"n":3,"hash":"x"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run("-name", "broken", file); code != 1 || !strings.Contains(errOut, "mariposa plan: mariposa/deploy/broken/desired names spec 3, but mariposa/deploy/broken/spec/3 is missing") {
		t.Fatalf("missing spec: exit %d %q", code, errOut)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.SpecKey("broken", 3), Value: []byte(`{"services":[{"Name":"x"}]}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run("-name", "broken", file); code != 1 || !strings.Contains(errOut, `mariposa/deploy/broken/spec/3: service "x" has no command`) {
		t.Fatalf("corrupt spec: exit %d %q", code, errOut)
	}
}

// The fit check is deploy's, as warnings: plan never fails on fit.
func TestPlanFit(t *testing.T) {
	agent := consultest.NewDev(t, consultest.Options{ExtraConfig: map[string]any{"node_meta": map[string]string{"zone": "z1"}}})
	c := agent.Client(t)
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Name: "mariposa", ID: "mariposa",
		Meta:  map[string]string{checks.ManagedByKey: checks.ManagedByValue, checks.FleetMetaKey: checks.FleetMetaValue},
		Check: &api.AgentServiceCheck{TTL: "1h", Status: api.HealthPassing}}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "z9.hcl")
	if err := os.WriteFile(file, []byte(`
service "api" {
  command = ["sleep", "600"]
  count   = 1
  constraint {
    attribute = "node.meta.zone"
    value     = "z9"
  }
}

service "web" {
  command = ["sleep", "600"]
  count   = 3
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, asJSON := range []bool{false, true} {
		ui := cli.NewMockUi()
		args := []string{"-consul-addr", agent.HTTPAddr(), file}
		if asJSON {
			args = append([]string{"-json"}, args...)
		}
		code := (&PlanCommand{UI: ui}).Run(args)
		out, errOut := ui.OutputWriter.String(), ui.ErrorWriter.String()
		unplaceable := "Warning: api: no live node can run it (0 of 1 feasible):\n  " + agent.Name + `: node.meta.zone = "z1" fails == "z9" (` + file +
			":5:3)\n  deploy refuses this unit (unless -allow-unplaced)\n"
		short := "Warning: web: count 3, but 1 of 1 live nodes are feasible at max_per_node 1: room for 1; 2 slots stay free until more nodes qualify\n"
		if code != 0 || errOut != unplaceable+short {
			t.Fatalf("json %v: exit %d\n%s\nwant\n%s", asJSON, code, errOut, unplaceable+short)
		}
		if !asJSON {
			if !strings.Contains(out, "+ api: count 1") {
				t.Fatalf("out:\n%s", out)
			}
			continue
		}
		var p struct{ Warnings []string }
		if err := json.Unmarshal([]byte(out), &p); err != nil || len(p.Warnings) != 2 ||
			"Warning: "+p.Warnings[0]+"\n" != unplaceable || "Warning: "+p.Warnings[1]+"\n" != short {
			t.Fatalf("json warnings %v: %q", err, p.Warnings)
		}
	}
	if pairs, _, _ := c.KV().List(cluster.DeployPrefix, nil); len(pairs) != 0 {
		t.Fatalf("plan wrote %d keys", len(pairs))
	}
	// web is another deployment's: the plan says deploy refuses it.
	other := &cluster.Spec{Format: cluster.SpecFormat, Name: "other", Hash: "h",
		Services: []*schema.Service{{Name: "web", Command: []string{"x"}, Placement: &schema.Placement{Count: 1}}}}
	if _, err := cluster.Deploy(c, other, cluster.DeployOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	ui := cli.NewMockUi()
	code := (&PlanCommand{UI: ui}).Run([]string{"-consul-addr", agent.HTTPAddr(), file})
	if want := "Warning: web: deployment other (spec 1) runs it, and a service's name is unique across deployments:\n  deploy refuses this plan\n"; code != 0 ||
		!strings.HasPrefix(ui.ErrorWriter.String(), want) {
		t.Fatalf("plan of another deployment's web: exit %d\n%s\nwant first\n%s", code, ui.ErrorWriter.String(), want)
	}
}

// The example of website/commands/plan.md is what plan prints for its
// files, the hashes aside: deploy the first hcl block, edit to the second,
// plan (text and -json | jq), deploy, plan again.
func TestPlanDoc(t *testing.T) {
	b, err := os.ReadFile("../website/commands/plan.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	hcls, _ := fencedBlocks(page, "hcl")
	texts, _ := fencedBlocks(page, "text")
	if len(hcls) != 2 {
		t.Fatalf("plan.md has %d hcl blocks, want 2", len(hcls))
	}
	const planCmd = "$ mariposa plan shop.hcl\n"
	const jqCmd = "$ mariposa plan -json shop.hcl | jq '.units[] | select(.unit == \"worker\")'\n"
	var plans []string
	var jq string
	for _, x := range texts {
		switch {
		case strings.HasPrefix(x, planCmd):
			plans = append(plans, strings.TrimPrefix(x, planCmd))
		case strings.HasPrefix(x, jqCmd):
			jq = strings.TrimPrefix(x, jqCmd)
		}
	}
	if len(plans) != 2 || jq == "" {
		t.Fatalf("plan.md has %d %q blocks and jq %v; want 2 and one", len(plans), planCmd, jq != "")
	}

	agent := consultest.NewDev(t)
	fleetNodes(t, agent.Client(t), 6) // what deploy's fit check counts; the test plays the fleet
	t.Chdir(t.TempDir())
	consul := []string{"-consul-addr", agent.HTTPAddr()}
	hash := regexp.MustCompile(`\b[0-9a-f]{24}\b`)
	norm := func(s string) string { return hash.ReplaceAllString(strings.TrimSpace(s), "HASH") }
	plan := func(args ...string) string {
		t.Helper()
		ui := cli.NewMockUi()
		if code := (&PlanCommand{UI: ui}).Run(append(append(consul, args...), "shop.hcl")); code != 0 {
			t.Fatalf("plan: exit %d %s", code, ui.ErrorWriter.String())
		}
		return ui.OutputWriter.String()
	}
	deploy := func() {
		t.Helper()
		ui := cli.NewMockUi()
		if code := (&DeployCommand{UI: ui}).Run(append(consul, "shop.hcl")); code != 0 {
			t.Fatalf("deploy: exit %d %s", code, ui.ErrorWriter.String())
		}
		// The page's fleet runs what is deployed: no fleet runs here, so
		// the deployment is made successful as the fleet would make it.
		finishDeployment(t, agent.Client(t), "default")
	}
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile("shop.hcl", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write(hcls[0])
	deploy()
	write(hcls[1])
	if got := plan(); norm(got) != norm(plans[0]) {
		t.Errorf("plan prints:\n%s\nplan.md shows:\n%s", got, plans[0])
	}
	var all struct{ Units []json.RawMessage }
	if err := json.Unmarshal([]byte(plan("-json")), &all); err != nil {
		t.Fatal(err)
	}
	var worker bytes.Buffer
	for _, u := range all.Units {
		var x struct{ Unit string }
		_ = json.Unmarshal(u, &x)
		if x.Unit == "worker" {
			var compact bytes.Buffer
			_ = json.Compact(&compact, u)
			_ = json.Indent(&worker, compact.Bytes(), "", "  ")
		}
	}
	if strings.TrimSpace(worker.String()) != strings.TrimSpace(jq) {
		t.Errorf("plan -json | jq prints:\n%s\nplan.md shows:\n%s", worker.String(), jq)
	}
	deploy()
	if got := plan(); norm(got) != norm(plans[1]) {
		t.Errorf("plan after deploy prints:\n%s\nplan.md shows:\n%s", got, plans[1])
	}
}

// finishDeployment marks deployment name's running spec successful, as a
// fleet would once every instance is healthy at it.
func finishDeployment(t *testing.T, c *api.Client, name string) {
	t.Helper()
	d, err := cluster.ReadDeployment(c, name)
	if err != nil || d.State == nil {
		t.Fatalf("deployment %s: %v", name, err)
	}
	st := *d.State
	st.Status = cluster.DeploySuccessful
	b, _ := json.Marshal(st)
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.StateKey(name, st.N), Value: b}, nil); err != nil {
		t.Fatal(err)
	}
	// Its units' records, as the judge marks them: successful, and their
	// version the stable one (what auto_revert goes back to).
	for _, u := range d.Spec.Units() {
		p, _, err := c.KV().Get(cluster.RecordKey(u.Unit.Name), nil)
		if err != nil || p == nil {
			t.Fatalf("the record of %s: %v", u.Unit.Name, err)
		}
		r, err := cluster.DecodeUnitRecord(p.Value)
		if err != nil {
			t.Fatal(err)
		}
		r.Status, r.Stable = cluster.DeploySuccessful, r.Version
		if _, err := c.KV().Put(&api.KVPair{Key: p.Key, Value: r.Encode()}, nil); err != nil {
			t.Fatal(err)
		}
	}
}
