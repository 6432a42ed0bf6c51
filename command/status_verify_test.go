package command

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/checks"
	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/report"
	"github.com/mariposa-sh/mariposa/schema"
)

// verifyFleet is a converged fleet at 1.4.2: the unit api (count 3) on n1,
// n2 and n3, the group front (web and side, count 1) on n2, the unit batch
// (no version, its one slot free), the node-local service proxy on n1 and
// node-exporter (no version) on n4.
func verifyFleet() ([]InstanceStatus, *cluster.State) {
	apiP := &schema.Placement{Count: 3}
	frontP := &schema.Placement{Count: 1}
	batchP := &schema.Placement{Count: 1}
	held := func(node string) cluster.SlotState {
		return cluster.SlotState{Session: "s-" + node, Value: cluster.SlotValue{Node: node, State: cluster.SlotHeld}}
	}
	st := &cluster.State{
		Units: map[string]cluster.UnitSpec{
			"api": {Unit: placement.Unit{Name: "api", Placement: apiP},
				Services: []*schema.Service{{Name: "api", Version: "1.4.2", Placement: apiP}}},
			"front": {Unit: placement.Unit{Name: "front", Placement: frontP}, Services: []*schema.Service{
				{Name: "web", Group: "front", Version: "1.4.2", Placement: frontP},
				{Name: "side", Group: "front", Version: "1.4.2", Placement: frontP}}},
			"batch": {Unit: placement.Unit{Name: "batch", Placement: batchP},
				Services: []*schema.Service{{Name: "batch", Placement: batchP}}},
		},
		Slots: map[string]map[int]cluster.SlotState{
			"api":   {0: held("n1"), 1: held("n2"), 2: held("n3")},
			"front": {0: held("n2")},
		},
		Problems: map[string]string{},
	}
	row := func(svc, id, node, slot string) InstanceStatus {
		return InstanceStatus{Service: svc, ServiceID: id, Node: node, Slot: slot, Version: "1.4.2", State: "running", Health: "passing"}
	}
	rows := []InstanceStatus{
		row("api", "api-0", "n1", "api/0"),
		row("api", "api-1", "n2", "api/1"),
		row("api", "api-2", "n3", "api/2"),
		{Service: "node-exporter", ServiceID: "node-exporter-n4", Node: "n4", State: "running", Health: "-"},
		row("proxy", "proxy-n1", "n1", ""),
		row("side", "side-0", "n2", "front/0"),
		row("web", "web-0", "n2", "front/0"),
	}
	rows[4].Health = "-" // no checks of its own: running is all there is
	return rows, st
}

// find is the row of id.
func find(rows []InstanceStatus, id string) *InstanceStatus {
	for i := range rows {
		if rows[i].ServiceID == id {
			return &rows[i]
		}
	}
	panic("no row " + id)
}

// without is rows without the instances ids.
func without(rows []InstanceStatus, ids ...string) []InstanceStatus {
	var out []InstanceStatus
	for _, r := range rows {
		keep := true
		for _, id := range ids {
			keep = keep && r.ServiceID != id
		}
		if keep {
			out = append(out, r)
		}
	}
	return out
}

// The verification from instances and the fleet's state to failures:
// version, state, health, the node's health, each slot, named nodes,
// SERVICE.
func TestVerify(t *testing.T) {
	const unversioned = " (1 instance without a version not checked)"
	cases := []struct {
		name  string
		edit  func(rows []InstanceStatus, st *cluster.State) []InstanceStatus
		only  string
		nodes []string
		want  []string // the text: the failures' lines, then the summary
	}{
		{name: "converged", want: []string{"verified: 6 instances on 3 nodes at 1.4.2" + unversioned}},
		{name: "an old version", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			find(rows, "api-1").Version = "1.4.1"
			return rows
		}, want: []string{
			"api/1 on n2: running 1.4.1, want 1.4.2",
			"not verified at 1.4.2: 1 of 6 instances on 3 nodes fail" + unversioned,
		}},
		{name: "no version in a slot", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			find(rows, "web-0").Version = "" // not checked; nothing else fails
			return rows
		}, want: []string{"verified: 5 instances on 3 nodes at 1.4.2 (2 instances without a version not checked)"}},
		{name: "health critical", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			find(rows, "proxy-n1").Health = "critical"
			return rows
		}, want: []string{
			"proxy on n1: version 1.4.2 but health critical",
			"not verified at 1.4.2: 1 of 6 instances on 3 nodes fail" + unversioned,
		}},
		{name: "state, health and node", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			r := find(rows, "api-2")
			r.State, r.Detail, r.Health = "backoff", "restarting in 2s after exit 1\nmore", "warning"
			r = find(rows, "web-0")
			r.nodeHealth, r.nodeBad = "critical", "serfHealth"
			r = find(rows, "api-0")
			r.Version, r.State, r.Health = "1.4.1", "lost", "critical"
			return rows
		}, want: []string{
			"api/0 on n1: lost 1.4.1, want 1.4.2; health critical",
			"api/2 on n3: version 1.4.2 but state backoff (restarting in 2s after exit 1 / more), health warning",
			"web (front/0) on n2: version 1.4.2 but node critical (serfHealth)",
			"not verified at 1.4.2: 3 of 6 instances on 3 nodes fail" + unversioned,
		}},
		{name: "slots", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			st.Units["api"].Unit.Placement.Count = 6
			st.Slots["api"][2] = cluster.SlotState{Value: cluster.SlotValue{Node: "n3", State: cluster.SlotHeld}} // lost with n3
			st.Slots["api"][4] = cluster.SlotState{Value: cluster.SlotValue{Node: "n4", State: cluster.SlotFailed, Reason: "reschedules exhausted"}}
			st.Slots["api"][5] = cluster.SlotState{Corrupt: "not a mariposa slot value: x"}
			st.Problems[cluster.SlotKey("api", 5)] = "a corrupt slot value" // the slot's line says it
			r := find(rows, "api-2")
			r.State, r.Health = "lost", "critical"
			return rows
		}, want: []string{
			"api/2 on n3: version 1.4.2 but state lost, health critical",
			"api/2 on n3: lost: n3 was lost, the slot awaits takeover",
			"api/3: free (no holder)",
			"api/4: failed on n4 (reschedules exhausted); mariposa reset api/4 frees it",
			"api/5: its value cannot be read: not a mariposa slot value: x",
			"not verified at 1.4.2: 1 of 6 instances on 3 nodes fail, 4 slots are not converged" + unversioned,
		}},
		{name: "held, not registered", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			return without(rows, "api-1", "side-0")
		}, want: []string{
			"api/1 on n2: held, no instance registered",
			"side (front/0) on n2: not registered, though n2 holds front/0",
			"not verified at 1.4.2: 0 of 4 instances on 3 nodes fail, 2 slots are not converged" + unversioned,
		}},
		{name: "instances out of their slots", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			stale := find(rows, "api-1")
			moved, past, gone := *stale, *stale, *stale
			moved.Node = "n4" // n2 holds api/1
			past.ServiceID, past.Node, past.Slot, past.State = "api-3", "n1", "api/3", "stopping"
			gone.Service, gone.ServiceID, gone.Node, gone.Slot = "old", "old-0", "n1", "old/0"
			return append(rows, moved, past, gone)
		}, want: []string{
			"api/1 on n4: version 1.4.2 but its slot is held by n2",
			"api/3 on n1: version 1.4.2 but state stopping, its slot is past the count (3)",
			"old/0 on n1: version 1.4.2 but no deployed unit has the slot old/0",
			"not verified at 1.4.2: 3 of 9 instances on 4 nodes fail" + unversioned,
		}},
		{name: "named nodes", nodes: []string{"n2", "n4", "n5"}, edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			find(rows, "api-1").Version = "1.4.1"
			st.Units["api"].Unit.Placement.Count = 4 // api/3 free: no named node's business
			return rows
		}, want: []string{
			"api/1 on n2: running 1.4.1, want 1.4.2",
			"n4: runs nothing with a version (1 instance without one)",
			"n5: runs nothing",
			"not verified at 1.4.2: 1 of 3 instances on 1 node fail, 2 named nodes run nothing" + unversioned,
		}},
		{name: "named nodes verified", nodes: []string{"n1", "n3"}, edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			find(rows, "web-0").Health = "critical" // on n2
			st.Units["api"].Unit.Placement.Count = 4
			return rows
		}, want: []string{"verified: 3 instances on 2 nodes at 1.4.2"}},
		{name: "a named node's slots", nodes: []string{"n2", "n3"}, edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			st.Slots["api"][2] = cluster.SlotState{Value: cluster.SlotValue{Node: "n3", State: cluster.SlotHeld}} // lost
			st.Slots["api"][0] = cluster.SlotState{Value: cluster.SlotValue{Node: "n1", State: cluster.SlotHeld}} // lost, n1 not named
			return without(rows, "api-1", "api-2")
		}, want: []string{
			"api/1 on n2: held, no instance registered",
			"api/2 on n3: lost: n3 was lost, the slot awaits takeover",
			"n3: runs nothing",
			"not verified at 1.4.2: 0 of 2 instances on 1 node fail, 2 slots are not converged, 1 named node runs nothing",
		}},
		{name: "a service", only: "api", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			find(rows, "proxy-n1").Health = "critical"
			st.Units["front"].Unit.Placement.Count = 2 // front/1 free
			return rows
		}, want: []string{"verified: 3 instances on 3 nodes at 1.4.2"}},
		{name: "a group", only: "front", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			find(rows, "api-0").Version = "1.4.1"
			return without(rows, "side-0")
		}, want: []string{
			"side (front/0) on n2: not registered, though n2 holds front/0",
			"not verified at 1.4.2: 0 of 1 instance on 1 node fail, 1 slot is not converged",
		}},
		{name: "a group's member", only: "web", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			return without(rows, "side-0") // side is not asked about
		}, want: []string{"verified: 1 instance on 1 node at 1.4.2"}},
		{name: "a service without a version", only: "node-exporter", want: []string{
			"nothing to verify: no instance of node-exporter has a version",
			"not verified at 1.4.2: nothing to verify (1 instance without a version not checked)",
		}},
		{name: "nothing", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			delete(st.Units, "api")
			delete(st.Units, "front")
			return nil
		}, want: []string{
			"nothing to verify: no instance has a version",
			"not verified at 1.4.2: nothing to verify",
		}},
		{name: "a deployment that cannot be read", edit: func(rows []InstanceStatus, st *cluster.State) []InstanceStatus {
			st.Problems[cluster.DesiredKey("shop")] = "a corrupt desired pointer; skipping the deployment"
			return rows
		}, want: []string{
			"mariposa/deploy/shop/desired: a corrupt desired pointer; skipping the deployment",
			"not verified at 1.4.2: 0 of 6 instances on 3 nodes fail, 1 deployment cannot be read" + unversioned,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, st := verifyFleet()
			if tc.edit != nil {
				rows = tc.edit(rows, st)
			}
			got := verify("1.4.2", rows, st, tc.only, tc.nodes)
			if lines := strings.Split(got.Text(), "\n"); !reflect.DeepEqual(lines, tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(tc.want, "\n"))
			}
			if got.Verified != (len(tc.want) == 1 && strings.HasPrefix(tc.want[0], "verified:")) || got.Version != "1.4.2" || got.Failures == nil {
				t.Errorf("verified %v, version %q, failures %v", got.Verified, got.Version, got.Failures)
			}
		})
	}
}

// The failures as data: who, what, which slot.
func TestVerifyFailures(t *testing.T) {
	rows, st := verifyFleet()
	find(rows, "side-0").Version = "1.4.1"
	st.Units["api"].Unit.Placement.Count = 4
	got := verify("1.4.2", rows, st, "", nil)
	want := []VerifyFailure{
		{Node: "n2", Service: "side", Slot: "front/0", Reason: "running 1.4.1, want 1.4.2", kind: failInstance},
		{Slot: "api/3", Reason: "free (no holder)", kind: failSlot},
	}
	if !reflect.DeepEqual(got.Failures, want) || got.Instances != 6 || got.Nodes != 3 || got.Unversioned != 1 || got.Verified {
		t.Errorf("got %s", asJSON(got))
	}
	if l := got.Failures[0].Line(); l != "side (front/0) on n2: running 1.4.1, want 1.4.2" {
		t.Errorf("line %q", l)
	}
}

// verifyAgent is a dev agent with a deployed unit api (count 2, version
// 1.4.2), both slots held by the agent's node with their instances
// running, the node-local service web at 1.4.2 with a passing check of its
// own, an unversioned job, and web at 1.4.2 on a second node n2 (a catalog
// registration).
type verifyAgent struct {
	t     *testing.T
	agent *consultest.Agent
	c     *api.Client
	sess  string
}

func newVerifyAgent(t *testing.T) *verifyAgent {
	agent := consultest.NewDev(t)
	v := &verifyAgent{t: t, agent: agent, c: agent.Client(t)}
	p := filepath.Join(t.TempDir(), "f.hcl")
	if err := os.WriteFile(p, []byte(`
service "api" {
  command = ["sleep", "600"]
  version = "1.4.2"
  count   = 2
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := schema.Load([]string{p}, schema.LoadOptions{Environ: []string{}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	spec, err := cluster.Reify("shop", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Deploy(v.c, spec, cluster.DeployOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	v.sess, _, err = v.c.Session().Create(&api.SessionEntry{Name: "test", Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 2 {
		v.hold(k)
		v.register("api", "api-"+strconv.Itoa(k), "1.4.2", "api/"+strconv.Itoa(k), false)
	}
	v.register("web", "web-"+agent.Name, "1.4.2", "", true)
	v.register("job", "job-"+agent.Name, "", "", false)
	v.remote("1.4.2", api.HealthPassing)
	return v
}

// hold takes api/k for the agent's node.
func (v *verifyAgent) hold(k int) {
	v.t.Helper()
	b, _ := json.Marshal(cluster.SlotValue{Node: v.agent.Name, State: cluster.SlotHeld, Since: time.Now().UTC()})
	ok, _, err := v.c.KV().Acquire(&api.KVPair{Key: cluster.SlotKey("api", k), Value: b, Session: v.sess}, nil)
	if err != nil || !ok {
		v.t.Fatalf("acquire api/%d: %v %v", k, ok, err)
	}
}

// register registers an instance on the agent as mariposa run does, its
// supervisor check running, and with own a TTL check of its own, passing.
func (v *verifyAgent) register(name, id, version, slot string, own bool) {
	v.t.Helper()
	meta := map[string]string{checks.ManagedByKey: checks.ManagedByValue}
	if version != "" {
		meta["version"] = version
	}
	reg := &api.AgentServiceRegistration{ID: id, Name: name, Meta: meta, Checks: api.AgentServiceChecks{
		// Critical first: a change of status syncs to the catalog at once.
		{CheckID: checks.SupervisorCheckID(id), Name: "mariposa supervisor", TTL: "10m", Status: api.HealthCritical},
	}}
	if own {
		reg.Checks = append(reg.Checks, &api.AgentServiceCheck{CheckID: id + ":ready", Name: "ready", TTL: "10m", Status: api.HealthPassing})
	}
	if err := v.c.Agent().ServiceRegister(reg); err != nil {
		v.t.Fatal(err)
	}
	out := report.Encode(report.Instance{State: "running", PID: 7, Reason: "running (pid 7)", Version: version, Slot: slot, Since: time.Now()})
	if err := v.c.Agent().UpdateTTL(checks.SupervisorCheckID(id), out, api.HealthPassing); err != nil {
		v.t.Fatal(err)
	}
}

// remote registers web on the node n2 at version, its own check at health.
func (v *verifyAgent) remote(version, health string) {
	v.t.Helper()
	id := "web-n2"
	if _, err := v.c.Catalog().Register(&api.CatalogRegistration{Node: "n2", Address: "10.0.0.2",
		Service: &api.AgentService{ID: id, Service: "web", Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue, "version": version}},
		Checks: api.HealthChecks{
			{Node: "n2", CheckID: checks.SupervisorCheckID(id), ServiceID: id, Status: api.HealthPassing,
				Output: report.Encode(report.Instance{State: "running", Reason: "running (pid 9)", Version: version})},
			{Node: "n2", CheckID: id + ":ready", Name: "ready", ServiceID: id, Status: health},
		}}, nil); err != nil {
		v.t.Fatal(err)
	}
}

// run runs status with args and returns its exit code and output.
func (v *verifyAgent) run(cmd *StatusCommand, args ...string) (int, string) {
	ui := cli.NewMockUi()
	cmd.UI = ui
	code := cmd.Run(append([]string{"-consul-addr", v.agent.HTTPAddr()}, args...))
	return code, ui.OutputWriter.String() + ui.ErrorWriter.String()
}

// until runs status -verify until it exits want, and returns its output.
func (v *verifyAgent) until(want int, args ...string) string {
	v.t.Helper()
	var code int
	var out string
	if !consultest.WaitFor(15*time.Second, func() bool {
		code, out = v.run(&StatusCommand{}, args...)
		return code == want
	}) {
		v.t.Fatalf("status %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}

// status -verify against an agent: verified, then an old version, a
// critical check, a named node that runs nothing, a free slot; -json.
func TestStatusVerify(t *testing.T) {
	v := newVerifyAgent(t)
	me := v.agent.Name

	out := v.until(0, "-verify", "1.4.2")
	if want := "verified: 4 instances on 2 nodes at 1.4.2 (1 instance without a version not checked)\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	if out := v.until(0, "-verify", "1.4.2", me); out != "verified: 3 instances on 1 node at 1.4.2 (1 instance without a version not checked)\n" {
		t.Errorf("on %s: %q", me, out)
	}
	// status SERVICE without -verify is as it was.
	if code, out := v.run(&StatusCommand{}, "web"); code != 0 || strings.Contains(out, "api") || !strings.Contains(out, "n2") {
		t.Errorf("status web: exit %d:\n%s", code, out)
	}

	// An old version on n2.
	v.remote("1.4.1", api.HealthPassing)
	out = v.until(2, "-verify", "1.4.2")
	if want := "web on n2: running 1.4.1, want 1.4.2\n" +
		"not verified at 1.4.2: 1 of 4 instances on 2 nodes fail (1 instance without a version not checked)\n"; out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
	// The agent's node alone is fine; -service api is too.
	v.until(0, "-verify", "1.4.2", me)
	if out := v.until(0, "-verify", "1.4.2", "-service", "api"); out != "verified: 2 instances on 1 node at 1.4.2\n" {
		t.Errorf("-service api: %q", out)
	}
	// -json, as data.
	code, raw := v.run(&StatusCommand{}, "-verify", "1.4.2", "-json")
	var got VerifyOutput
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil || code != 2 {
		t.Fatalf("exit %d, %v:\n%s", code, err, raw)
	}
	want := VerifyOutput{Version: "1.4.2", Instances: 4, Nodes: 2, Unversioned: 1,
		Failures: []VerifyFailure{{Node: "n2", Service: "web", Reason: "running 1.4.1, want 1.4.2"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("-json:\n%s\nwant:\n%s", raw, asJSON(want))
	}
	var shape map[string]any
	_ = json.Unmarshal([]byte(raw), &shape)
	if f, _ := shape["failures"].([]any); len(f) != 1 || len(f[0].(map[string]any)) != 4 {
		t.Errorf("a failure has node, service, slot and reason, always:\n%s", raw)
	}
	v.remote("1.4.2", api.HealthPassing)
	v.until(0, "-verify", "1.4.2")

	// A critical check of its own.
	if err := v.c.Agent().UpdateTTL("web-"+me+":ready", "not ready", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	if out := v.until(2, "-verify", "1.4.2"); !strings.HasPrefix(out, "web on "+me+": version 1.4.2 but health critical\n") {
		t.Errorf("critical:\n%s", out)
	}
	if err := v.c.Agent().UpdateTTL("web-"+me+":ready", "", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	v.until(0, "-verify", "1.4.2")

	// A named node with nothing.
	if out := v.until(2, "-verify", "1.4.2", "n2", "n5", "n2"); out != "n5: runs nothing\n"+
		"not verified at 1.4.2: 0 of 1 instance on 1 node fail, 1 named node runs nothing\n" {
		t.Errorf("n5:\n%s", out)
	}

	// A free slot: api/1 released, its instance gone.
	if _, _, err := v.c.KV().Release(&api.KVPair{Key: cluster.SlotKey("api", 1), Session: v.sess}, nil); err != nil {
		t.Fatal(err)
	}
	if err := v.c.Agent().ServiceDeregister("api-1"); err != nil {
		t.Fatal(err)
	}
	if out := v.until(2, "-verify", "1.4.2"); out != "api/1: free (no holder)\n"+
		"not verified at 1.4.2: 0 of 3 instances on 2 nodes fail, 1 slot is not converged (1 instance without a version not checked)\n" {
		t.Errorf("free slot:\n%s", out)
	}
	// ... which the agent's node alone does not answer for.
	v.until(0, "-verify", "1.4.2", me)
}

// -wait: not verified at first; a registration updated during the wait
// makes it verified, without waiting out the duration. Without the
// update, the wait runs out and the last check stands.
func TestStatusVerifyWait(t *testing.T) {
	v := newVerifyAgent(t)
	v.until(0, "-verify", "1.4.2")
	v.remote("1.4.1", api.HealthPassing)
	v.until(2, "-verify", "1.4.2")

	first := make(chan VerifyOutput, 1)
	var rounds []VerifyOutput
	cmd := &StatusCommand{onVerify: func(o VerifyOutput) {
		rounds = append(rounds, o)
		select {
		case first <- o:
		default:
		}
	}}
	updated := make(chan struct{})
	go func() {
		defer close(updated)
		// Once the command has checked once (and failed), it blocks: then
		// n2 moves to 1.4.2.
		select {
		case <-first:
			v.remote("1.4.2", api.HealthPassing)
		case <-time.After(30 * time.Second):
		}
	}()
	start := time.Now()
	code, out := v.run(cmd, "-verify", "1.4.2", "-wait", "60s")
	<-updated
	if code != 0 || out != "verified: 4 instances on 2 nodes at 1.4.2 (1 instance without a version not checked)\n" {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if len(rounds) < 2 || rounds[0].Verified || !rounds[len(rounds)-1].Verified {
		t.Errorf("rounds: %s", asJSON(rounds))
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s: the wait did not see the change", d)
	}

	// No change: the wait runs out, and says why.
	v.remote("1.4.1", api.HealthPassing)
	v.until(2, "-verify", "1.4.2")
	start = time.Now()
	code, out = v.run(&StatusCommand{}, "-verify", "1.4.2", "-wait", "500ms", "-json")
	var got VerifyOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 2 || got.Verified || len(got.Failures) != 1 ||
		got.Failures[0].Reason != "running 1.4.1, want 1.4.2" {
		t.Errorf("exit %d (%v):\n%s", code, err, out)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 10*time.Second {
		t.Errorf("a 500ms wait took %s", d)
	}
}

// Usage errors and Consul errors exit 1, apart from a failed verification's 2.
func TestStatusVerifyErrors(t *testing.T) {
	port := consultest.FreePorts(t, 1)[0]
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-verify", ""}, "-verify needs a VERSION"},
		{[]string{"-verify", "-json", "n1"}, "-verify needs a VERSION, not -json"},
		{[]string{"-wait", "1s"}, "-wait goes with -verify"},
		{[]string{"-verify", "1", "-wait", "-1s"}, "-wait must not be negative"},
		{[]string{"-verify", "1", "n1", "-json"}, "-json after a NODE: flags go before the NODEs"},
		{[]string{"-service", "api", "web"}, "give SERVICE or -service, not both"},
		{[]string{"api", "web"}, "at most one SERVICE"},
		{[]string{"-verify", "1.4.2"}, "connection refused"},
		{[]string{"-verify", "1.4.2", "-wait", "1m"}, "connection refused"}, // at once: the command cannot work
	} {
		ui := cli.NewMockUi()
		start := time.Now()
		code := (&StatusCommand{UI: ui}).Run(append([]string{"-consul-addr", "127.0.0.1:" + strconv.Itoa(port)}, tc.args...))
		if code != 1 || !strings.Contains(ui.ErrorWriter.String(), "mariposa status: ") || !strings.Contains(ui.ErrorWriter.String(), tc.want) {
			t.Errorf("%q: exit %d:\n%s", tc.args, code, ui.ErrorWriter.String())
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%q took %s", tc.args, d)
		}
	}
}

// Without key:read on mariposa/, -verify cannot check the slots: exit 1,
// not a failed verification.
func TestStatusVerifyNoKV(t *testing.T) {
	v := newVerifyAgent(t)
	v.until(0, "-verify", "1.4.2")
	srv := kvForbidden(t, v.agent.HTTPAddr())
	for _, wait := range []string{"0", "1m"} {
		ui := cli.NewMockUi()
		start := time.Now()
		if code := (&StatusCommand{UI: ui}).Run([]string{"-consul-addr", srv, "-verify", "1.4.2", "-wait", wait}); code != 1 ||
			!strings.Contains(ui.ErrorWriter.String(), "-verify needs the fleet's state (key:read on mariposa/)") ||
			!strings.Contains(ui.ErrorWriter.String(), "Permission denied") {
			t.Errorf("-wait %s: exit %d:\n%s", wait, code, ui.ErrorWriter.String())
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("-wait %s took %s", wait, d)
		}
	}
}

// A node's own checks (serfHealth, maintenance) are read for -verify.
func TestInstanceRowNodeChecks(t *testing.T) {
	e := &api.ServiceEntry{Node: &api.Node{Node: "n1"}, Service: &api.AgentService{ID: "web-n1", Service: "web"},
		Checks: api.HealthChecks{
			{CheckID: "serfHealth", Status: api.HealthCritical},
			{CheckID: "_node_maintenance", Status: api.HealthCritical},
			{CheckID: "other", Status: api.HealthPassing},
			{CheckID: "web-n1:ready", ServiceID: "web-n1", Status: api.HealthPassing},
		}}
	r := instanceRow(e)
	// The agent is dead (serfHealth critical): the service's own checks
	// are stale, its health unknown (issue 25).
	if r.nodeHealth != api.HealthMaint || r.nodeBad != "serfHealth, _node_maintenance" || r.Health != "unknown" || r.State != "lost" {
		t.Errorf("node %q (%q), health %q", r.nodeHealth, r.nodeBad, r.Health)
	}
	e.Checks = e.Checks[3:]
	if r := instanceRow(e); r.nodeHealth != "" || r.nodeBad != "" {
		t.Errorf("no node checks: node %q (%q)", r.nodeHealth, r.nodeBad)
	}
}

// kvForbidden is a proxy to the agent at addr that refuses the KV store,
// as a token without key:read does; it returns the proxy's URL.
func kvForbidden(t *testing.T, addr string) string {
	target, _ := url.Parse("http://" + addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/kv/") {
			http.Error(w, "Permission denied", http.StatusForbidden)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// waitChange returns at a change of any endpoint it watches, and false
// when its context ends first.
func TestWaitChange(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	index := map[watchKey]uint64{}
	for _, prefix := range []string{cluster.SlotsPrefix, cluster.DeployPrefix} {
		_, meta, err := c.KV().Keys(prefix, "/", nil)
		if err != nil {
			t.Fatal(err)
		}
		index[watchKey{watchKV, prefix}] = meta.LastIndex
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if waitChange(ctx, c, index) {
		t.Error("a change without one")
	}
	done := make(chan bool, 1)
	go func() { done <- waitChange(context.Background(), c, index) }()
	if _, err := c.KV().Put(&api.KVPair{Key: cluster.SlotKey("x", 0), Value: []byte("{}")}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-done:
		if !ok {
			t.Error("no change seen")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the put was not seen")
	}
}

// The -verify examples of website/commands/status.md are what -verify
// prints, exit status included, for the fleet they describe: verifyFleet
// after a rollout where api/1 on n2 still runs 1.4.1, web's check is
// critical and api/3 has no holder.
func TestStatusDocVerify(t *testing.T) {
	b, err := os.ReadFile("../website/commands/status.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, st := verifyFleet()
	find(rows, "api-1").Version = "1.4.1"
	find(rows, "web-0").Health = "critical"
	st.Units["api"].Unit.Placement.Count = 4

	texts, _ := fencedBlocks(string(b), "text")
	var cmds, jsons, exits int
	code := -1
	check := func(cmd string, out []string) {
		t.Helper()
		shown := strings.Join(out, "\n")
		if cmd == "echo $?" {
			exits++
			if shown != strconv.Itoa(code) {
				t.Errorf("status.md shows exit %s, -verify exits %d", shown, code)
			}
			return
		}
		args, ok := strings.CutPrefix(cmd, "mariposa status ")
		if !ok {
			t.Fatalf("status.md runs %q", cmd)
		}
		var version, service string
		var asJSON bool
		fs := flag.NewFlagSet("status", flag.ContinueOnError)
		fs.StringVar(&version, "verify", "", "")
		fs.StringVar(&service, "service", "", "")
		fs.BoolVar(&asJSON, "json", false, "")
		if err := fs.Parse(strings.Fields(args)); err != nil || version == "" {
			t.Fatalf("status.md runs %q: %v", cmd, err)
		}
		res := verify(version, rows, st, service, fs.Args())
		got := res.Text()
		if asJSON {
			jsons++
			j, _ := json.MarshalIndent(res, "", "  ")
			got = string(j)
		}
		cmds++
		if got != shown {
			t.Errorf("status.md shows for %q:\n%s\n-verify prints:\n%s", cmd, shown, got)
		}
		code = map[bool]int{true: 0, false: 2}[res.Verified]
	}
	for _, tx := range texts {
		if !strings.HasPrefix(tx, "$ mariposa status -verify") {
			continue
		}
		var cmd string
		var out []string
		for _, line := range strings.Split(strings.TrimSuffix(tx, "\n"), "\n") {
			if c, ok := strings.CutPrefix(line, "$ "); ok {
				if cmd != "" {
					check(cmd, out)
				}
				cmd, out = c, nil
				continue
			}
			out = append(out, line)
		}
		check(cmd, out)
	}
	if cmds < 4 || jsons != 1 || exits < 1 {
		t.Errorf("status.md shows %d -verify runs (%d with -json) and %d exit statuses", cmds, jsons, exits)
	}
}
