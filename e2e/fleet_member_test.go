package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// mariposaCLI runs a mariposa command against agent and returns its
// combined output and exit code: the command's words ("deploy stop"), then
// -consul-addr, then args.
func mariposaCLI(t *testing.T, agent *consultest.Agent, command string, args ...string) (string, int) {
	t.Helper()
	full := append(append(strings.Fields(command), "-consul-addr", agent.HTTPAddr()), args...)
	out, err := exec.Command(mariposaBin, full...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// kvState is every key under prefix with its modify index: what "the KV is
// unchanged" compares.
func kvState(t *testing.T, c *api.Client, prefix string) map[string]uint64 {
	t.Helper()
	pairs, _, err := c.KV().List(prefix, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, p := range pairs {
		out[p.Key] = p.ModifyIndex
	}
	return out
}

// Issue 32 and issue 25 (item 4, friction): three agents, one with a plain
// `mariposa run` (no -cluster), two with `mariposa run -cluster`.
//   - with only the plain node up, deploy refuses: no node runs the fleet;
//   - count 2 is placed on the two fleet nodes within the usual claim time
//     (a plain node ranked first for a slot would leave it free for ever);
//     `why` gives the plain node its verdict, "not in the fleet";
//   - deploying one of the units under another -name is refused, naming the
//     owner, and the KV is unchanged;
//   - a file with no service is refused; `deploy stop` stops the
//     instances and releases the slots; `-purge` removes the records.
func TestFleetPlainNodeNotCounted(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	cl := consultest.NewCluster(t, 1, 3)
	c := cl.Servers[0].Client(t)
	srv := cl.Servers[0]
	names := []string{cl.Clients[0].Name, cl.Clients[1].Name, cl.Clients[2].Name}
	sort.Strings(names)
	// The plain node is the one whose name sorts first: the first live
	// supervisor by name is the one that judges deployments.
	plain := names[0]
	dir := t.TempDir()

	startMariposa(t, cl.Agent(plain), nil, writeHCL(t, `
service "local" {
  command = ["sleep", "600"]
}
`))
	waitFor(t, 60*time.Second, "the plain supervisor live", func() (bool, string) {
		return len(passingInstances(c, "mariposa")) == 1, ""
	})
	two := writeHCL(t, fmt.Sprintf(`
service "two" {
  command = ["/bin/sh", "-c", "exec %s -stamp-file %s/two.$MARIPOSA_NODE.stamps"]
  count   = 2
  stop {
    timeout = "2s"
  }
}
`, childBin, dir))

	// Friction: no node runs the fleet yet. Refused, nothing written.
	if out, code := mariposaCLI(t, srv, "deploy", two); code != 1 || !strings.Contains(out, "no node runs the fleet") {
		t.Fatalf("deploy with only a plain node: exit %d\n%s", code, out)
	}
	if keys := kvState(t, c, cluster.DeployPrefix); len(keys) != 0 {
		t.Fatalf("a refused deploy wrote %v", keys)
	}

	for _, n := range names[1:] {
		startMariposa(t, cl.Agent(n), nil, "-cluster")
	}
	waitFor(t, 60*time.Second, "every supervisor live", func() (bool, string) {
		live := passingInstances(c, "mariposa")
		return len(live) == 3, fmt.Sprint(len(live))
	})
	for _, e := range passingInstances(c, "mariposa") {
		if got, want := e.Service.Meta[checks.FleetMetaKey] == checks.FleetMetaValue, e.Node.Node != plain; got != want {
			t.Errorf("%s's registration says fleet %v, want %v", e.Node.Node, got, want)
		}
	}
	watches := map[string]*childWatch{}
	for _, n := range names {
		watches[n] = watchChildren(t, filepath.Join(dir, "two."+n+".stamps"))
	}
	deploy(t, srv, two)
	waitFor(t, 60*time.Second, "two's slots held by the two fleet nodes", func() (bool, string) {
		h := slotHolders(t, c, "two")
		ok := len(h) == 2 && h[0] != "" && h[1] != "" && h[0] != h[1]
		for _, n := range h {
			ok = ok && n != plain
		}
		return ok && len(passingInstances(c, "two")) == 2, fmt.Sprint(h)
	})
	out, code := mariposaCLI(t, srv, "why", "two")
	if code != 0 || !strings.Contains(out, "of 3 nodes feasible") {
		t.Errorf("mariposa why two: exit %d\n%s", code, out)
	}
	plainRow := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "-" && f[1] == plain {
			plainRow = strings.Contains(line, "not in the fleet")
		}
	}
	if !plainRow {
		t.Errorf("mariposa why two gives %s no \"not in the fleet\" verdict:\n%s", plain, out)
	}

	// Issue 25 item 4: a unit another deployment owns.
	before := kvState(t, c, cluster.Prefix)
	out, code = mariposaCLI(t, srv, "deploy", "-name", "other", two)
	if code != 1 || !strings.Contains(out, `"two" belongs to deployment "default"`) {
		t.Errorf("deploy -name other of default's unit: exit %d\n%s", code, out)
	}
	after := kvState(t, c, cluster.Prefix)
	for k, idx := range after {
		if strings.HasPrefix(k, cluster.SlotsPrefix) || strings.HasPrefix(k, cluster.AuditPrefix) {
			continue // the fleet's own writes (health marks in slot values)
		}
		if before[k] != idx {
			t.Errorf("the refused deploy changed %s", k)
		}
	}
	for k := range after {
		if strings.HasPrefix(k, cluster.DeployPrefix+"other/") {
			t.Errorf("the refused deploy wrote %s", k)
		}
	}

	// Friction: an empty file is an error, and changes nothing.
	empty := writeHCL(t, "# nothing\n")
	desired := kvState(t, c, cluster.DesiredKey("default"))
	if out, code := mariposaCLI(t, srv, "deploy", empty); code != 1 || !strings.Contains(out, "declare no service") ||
		!strings.Contains(out, "mariposa deploy stop default") {
		t.Errorf("deploy of an empty file: exit %d\n%s", code, out)
	}
	if got := kvState(t, c, cluster.DesiredKey("default")); fmt.Sprint(got) != fmt.Sprint(desired) {
		t.Errorf("deploying an empty file moved desired: %v -> %v", desired, got)
	}

	// Friction: deploy stop, then -purge.
	if out, code := mariposaCLI(t, srv, "deploy stop", "default"); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("deploy stop: exit %d\n%s", code, out)
	}
	waitFor(t, 60*time.Second, "two's instances stopped and its slots released", func() (bool, string) {
		h := slotHolders(t, c, "two")
		running := 0
		for _, w := range watches {
			running += len(w.running())
		}
		return h[0] == "" && h[1] == "" && running == 0 && len(instancesOf(c, "two")) == 0, fmt.Sprint(h, running)
	})
	if st := kvState(t, c, cluster.DeployPrefix+"default/"); len(st) == 0 {
		t.Error("deploy stop (no -purge) removed the deployment's records")
	}
	if out, code := mariposaCLI(t, srv, "deploy stop", "-purge", "default"); code != 0 || !strings.Contains(out, "purged") {
		t.Fatalf("deploy stop -purge: exit %d\n%s", code, out)
	}
	if st := kvState(t, c, cluster.DeployPrefix); len(st) != 0 {
		t.Errorf("after -purge: %v", st)
	}
	if st := kvState(t, c, cluster.SlotsPrefix+"two/"); len(st) != 0 {
		t.Errorf("after -purge, two's slot keys: %v", st)
	}
	if out, code := mariposaCLI(t, srv, "status"); code != 0 || strings.Contains(out, "default: spec") {
		t.Errorf("status after -purge lists the deployment: exit %d\n%s", code, out)
	}
	actions := auditActions(t, c, "default")
	if actions["stop"] != 1 || actions["purge"] != 1 {
		t.Errorf("audit actions of default: %v", actions)
	}
	// The name is free again: deploying it under another name works.
	deploy(t, srv, "-name", "other", two)
	waitFor(t, 60*time.Second, "two placed again, under other", func() (bool, string) {
		h := slotHolders(t, c, "two")
		return len(h) == 2 && h[0] != "" && h[1] != "" && h[0] != plain && h[1] != plain, fmt.Sprint(h)
	})
}

// Issue 25 item 6: two supervisors on one node (-allow-second-supervisor),
// the first holding a slot of a count-1 unit. Stopping the second never
// touches the first: its child keeps its PID, its session stays valid (the
// slot stays held by it), and it stays in the fleet.
func TestSecondSupervisorStopKeepsFirst(t *testing.T) {
	consultest.SkipShort(t, "a fleet in -short mode")
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	startMariposa(t, agent, nil, "-cluster")
	waitFor(t, 30*time.Second, "the first supervisor live", func() (bool, string) {
		return len(passingInstances(c, "mariposa")) == 1, ""
	})
	deploy(t, agent, writeHCL(t, fmt.Sprintf(`
service "one" {
  command = ["/bin/sh", "-c", "exec %s -stamp-file %s/one.stamps"]
  count   = 1
}
`, childBin, dir)))
	w := watchChildren(t, filepath.Join(dir, "one.stamps"))
	slotSession := func() string {
		p, _, err := c.KV().Get(cluster.SlotKey("one", 0), &api.QueryOptions{RequireConsistent: true})
		if err != nil || p == nil {
			return ""
		}
		return p.Session
	}
	var pid int
	var sess string
	waitFor(t, 60*time.Second, "one/0 held, its child running", func() (bool, string) {
		sess = slotSession()
		r := w.running()
		if len(r) == 1 {
			pid = r[0]
		}
		return sess != "" && len(r) == 1 && len(passingInstances(c, "one")) == 1, fmt.Sprint(sess, r)
	})

	second := startMariposa(t, agent, nil, "-allow-second-supervisor", "-http-addr", "off", writeHCL(t, `
service "side" {
  command = ["sleep", "600"]
}
`))
	waitFor(t, 30*time.Second, "the second supervisor's service live", func() (bool, string) {
		return len(passingInstances(c, "side")) == 1, ""
	})
	if code := second.stop(t, syscall.SIGINT, 30*time.Second); code != 0 {
		t.Fatalf("the second supervisor exited %d", code)
	}
	waitFor(t, 10*time.Second, "the second's service gone", func() (bool, string) {
		return len(instancesOf(c, "side")) == 0, ""
	})
	// Longer than the liveness TTL (3s) and the lock delay: a lost session
	// would have freed the slot and killed the child by then.
	consistently(t, 8*time.Second, "the first supervisor untouched", func() (bool, string) {
		r := w.running()
		s := slotSession()
		info, _, err := c.Session().Info(sess, nil)
		es, _, _ := c.Health().Service("mariposa", "", true, nil)
		live := len(es)
		ok := len(r) == 1 && r[0] == pid && s == sess && err == nil && info != nil && live == 1
		return ok, fmt.Sprintf("children %v (was %d), slot session %q (was %q), session info %v %v, live supervisors %d", r, pid, s, sess, info != nil, err, live)
	})
	e := passingInstances(c, "mariposa")[agent.Name]
	if e == nil || e.Service.ID != checks.SupervisorServiceID(agent.Name) || e.Service.Meta[checks.FleetMetaKey] != checks.FleetMetaValue {
		t.Errorf("the first supervisor's registration: %+v", e)
	}
}
