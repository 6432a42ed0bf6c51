package command

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// TestDeployFit: deploy checks each unit against the live supervisors. No
// live node can run it: an error naming each node and the constraint it
// fails, and nothing written (unless -allow-unplaced); count beyond what the
// feasible nodes hold: a warning with the numbers, and deployed.
func TestDeployFit(t *testing.T) {
	agent := consultest.NewDev(t, consultest.Options{ExtraConfig: map[string]any{"node_meta": map[string]string{"zone": "z1"}}})
	c := agent.Client(t)
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) (int, string, string) {
		ui := cli.NewMockUi()
		code := (&DeployCommand{UI: ui}).Run(append([]string{"-consul-addr", agent.HTTPAddr()}, args...))
		return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
	}
	z9 := file("z9.hcl", `
service "api" {
  command = ["sleep", "600"]
  count   = 1
  constraint {
    attribute = "node.meta.zone"
    value     = "z9"
  }
}
`)
	// No live supervisor yet: nothing would run it, so deploy refuses and
	// writes nothing, unless -allow-unplaced (then it warns).
	page, err := os.ReadFile("../website/commands/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run("-name", "first", z9); code != 1 || out != "" ||
		!strings.Contains(errOut, "no node runs the fleet") || !strings.Contains(errOut, "Nothing was deployed") {
		t.Fatalf("no supervisors: exit %d, %q %q", code, out, errOut)
	} else if shown := strings.ReplaceAll(errOut, agent.HTTPAddr(), "127.0.0.1:8500"); !strings.Contains(string(page), "$ mariposa deploy api.hcl\n"+shown) {
		t.Errorf("deploy.md does not show:\n%s", shown)
	}
	if keys, _, err := c.KV().Keys(cluster.DeployPrefix, "", nil); err != nil || len(keys) != 0 {
		t.Fatalf("no supervisors: deploy wrote %v (%v)", keys, err)
	}
	if code, out, errOut := run("-name", "first", "-allow-unplaced", z9); code != 0 || !strings.Contains(errOut, "Warning: no node runs the fleet") || !strings.Contains(out, "spec 1") {
		t.Fatalf("no supervisors, -allow-unplaced: exit %d, %q %q", code, out, errOut)
	}
	if _, err := c.KV().DeleteTree(cluster.DeployPrefix, nil); err != nil {
		t.Fatal(err)
	}

	// One live supervisor, in z1.
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{Name: "mariposa", ID: "mariposa",
		Meta:  map[string]string{checks.ManagedByKey: checks.ManagedByValue, checks.FleetMetaKey: checks.FleetMetaValue},
		Check: &api.AgentServiceCheck{TTL: "1h", Status: api.HealthPassing}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(z9)
	want := "mariposa deploy: api: no live node can run it (0 of 1 feasible):\n  " + agent.Name +
		`: node.meta.zone = "z1" fails == "z9" (` + z9 + ":5:3)\n" +
		"Nothing was deployed. Fix the constraints or the resources, or deploy with -allow-unplaced to wait for nodes that qualify.\n"
	if code != 1 || errOut != want || out != "" {
		t.Fatalf("unplaceable: exit %d\n%s\nwant\n%s", code, errOut, want)
	}
	if pairs, _, _ := c.KV().List(cluster.DeployPrefix, nil); len(pairs) != 0 {
		t.Fatalf("an unplaceable deploy wrote %d keys", len(pairs))
	}
	if code, out, errOut := run("-allow-unplaced", z9); code != 0 || !strings.Contains(out, "spec 1") {
		t.Fatalf("-allow-unplaced: exit %d, %q %q", code, out, errOut)
	}
	// api is default's now: not another deployment's, and nothing written.
	before, _, _ := c.KV().Keys(cluster.Prefix, "", nil)
	if code, out, errOut := run("-name", "other", "-allow-unplaced", z9); code != 1 || out != "" ||
		!strings.Contains(string(page), "$ mariposa deploy -name other api.hcl\n"+errOut) {
		t.Errorf("deploy -name other of default's api: exit %d %q, and deploy.md does not show:\n%s", code, out, errOut)
	}
	if after, _, _ := c.KV().Keys(cluster.Prefix, "", nil); len(after) != len(before) {
		t.Errorf("a refused deploy wrote keys: %v, was %v", after, before)
	}

	three := file("three.hcl", `
service "web" {
  command = ["sleep", "600"]
  count   = 3
}
`)
	code, out, errOut = run("-name", "web", three)
	if code != 0 || !strings.Contains(out, "spec 1") ||
		errOut != "Warning: web: count 3, but 1 of 1 live nodes are feasible at max_per_node 1: room for 1; 2 slots stay free until more nodes qualify\n" {
		t.Fatalf("short: exit %d, %q %q", code, out, errOut)
	}
}

// TestDeployDocFit: the fit messages on the deploy page are what deploy
// prints for the fleet they describe.
func TestDeployDocFit(t *testing.T) {
	b, err := os.ReadFile("../website/commands/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	var nodes []placement.NodeInfo
	for i, disk := range []string{"hdd", "ssd", "ssd"} {
		nodes = append(nodes, placement.NodeInfo{Name: "node-" + string(rune('1'+i)), Fleet: true, Live: true, Eligible: true,
			Meta: map[string]string{"disk": disk}})
	}
	db := placement.FitOf(placement.Unit{Name: "db", Placement: &schema.Placement{Count: 1, MaxPerNode: 1,
		Constraints: []*schema.Constraint{{Attribute: "node.meta.disk", Operator: "==", Value: "nvme", Pos: "db.hcl:5:3"}}}}, nodes)
	web := placement.FitOf(placement.Unit{Name: "web", Placement: &schema.Placement{Count: 5, MaxPerNode: 1}}, nodes)
	for _, want := range []string{"mariposa deploy: " + db.String() + "\nNothing was deployed.", "Warning: " + web.String() + "\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("deploy.md does not show:\n%s", want)
		}
	}
}

func TestRetryNoLeader(t *testing.T) {
	noLeaderErr := errors.New("Unexpected response code: 500 (No cluster leader)")
	calls := 0
	err := retryNoLeader(func() error {
		calls++
		if calls < 3 {
			return noLeaderErr
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("a leader back on the third try: %v after %d calls", err, calls)
	}
	calls = 0
	other := errors.New("Unexpected response code: 403 (Permission denied)")
	if err := retryNoLeader(func() error { calls++; return other }); err != other || calls != 1 {
		t.Fatalf("another error: %v after %d calls, want no retry", err, calls)
	}
	defer func(d time.Duration) { noLeaderWait = d }(noLeaderWait)
	noLeaderWait = 600 * time.Millisecond
	calls = 0
	if err := retryNoLeader(func() error { calls++; return noLeaderErr }); err != noLeaderErr || calls != 2 {
		t.Fatalf("no leader for good: %v after %d calls, want 2 within the wait", err, calls)
	}
}

// fleetNodes registers n live supervisors that run the fleet (nodes
// fleet-1..n, in the catalog), as mariposa run -cluster does: what
// deploy's fit check counts.
func fleetNodes(t *testing.T, c *api.Client, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		node := fmt.Sprintf("fleet-%d", i)
		_, err := c.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1",
			Service: &api.AgentService{ID: "mariposa-" + node, Service: "mariposa",
				Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue, checks.FleetMetaKey: checks.FleetMetaValue}},
			Check: &api.AgentCheck{Node: node, CheckID: "mariposa-" + node + ":mariposa", Name: "mariposa liveness",
				Status: api.HealthPassing, ServiceID: "mariposa-" + node}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
}
