package command

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
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

// asJSON renders v for a failure message.
func asJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// Every slot state, a group whose two members share a slot, slots past the
// count, and the SERVICE filter, as -json and the units table show them.
func TestUnitsStatus(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	api5 := &schema.Placement{Count: 6, Exclusive: true}
	front := &schema.Placement{Count: 2}
	st := &cluster.State{
		Units: map[string]cluster.UnitSpec{
			"api": {Unit: placement.Unit{Name: "api", Placement: api5},
				Services: []*schema.Service{{Name: "api", Placement: api5}}},
			"front": {Unit: placement.Unit{Name: "front", Placement: front},
				Services: []*schema.Service{{Name: "web", Group: "front", Placement: front}, {Name: "side", Group: "front", Placement: front}}},
			"empty": {Unit: placement.Unit{Name: "empty"}}, // no placement: a count of 0
		},
		Slots: map[string]map[int]cluster.SlotState{
			"api": {
				0: {Session: "s1", Value: cluster.SlotValue{Node: "n1", State: cluster.SlotHeld, Since: t0}},
				1: {Value: cluster.SlotValue{Node: "n2", State: cluster.SlotFailed, Since: t0.Add(time.Minute), Reason: "reschedules exhausted",
					Reschedules: []placement.RescheduleEvent{{Node: "n2", At: t0}, {Node: "n4", At: t0.Add(time.Second)}}}},
				2: {Value: cluster.SlotValue{Node: "n3", State: cluster.SlotHeld, Since: t0}}, // its node was lost
				3: {Value: cluster.SlotValue{Node: "n1", State: cluster.SlotReleased, Since: t0, Reason: "drained"}},
				// 4: never claimed
				5: {Corrupt: "not a mariposa slot value: bad"},
				6: {Session: "s1", Value: cluster.SlotValue{Node: "n1", State: cluster.SlotHeld}}, // past the count: stopping
			},
			"front": {
				0: {Session: "s2", Value: cluster.SlotValue{Node: "n2", State: cluster.SlotHeld, Since: t0}},
			},
		},
	}
	rows := []InstanceStatus{
		{Service: "api", ServiceID: "api-0", Node: "n1", State: "running", Health: "passing", Slot: "api/0"},
		{Service: "api", ServiceID: "api-2", Node: "n3", State: "lost", Health: "critical", Slot: "api/2"},
		{Service: "api", ServiceID: "api-6", Node: "n1", State: "stopping", Health: "-", Slot: "api/6"},
		{Service: "plain", ServiceID: "plain-n1", Node: "n1", State: "running", Health: "-"},
		{Service: "side", ServiceID: "side-0", Node: "n2", State: "starting", Health: "-", Slot: "front/0"},
		{Service: "web", ServiceID: "web-0", Node: "n1", State: "stopping", Health: "-", Slot: "front/0"},
		{Service: "web", ServiceID: "web-0", Node: "n2", State: "running", Health: "passing", Slot: "front/0"},
	}
	none := []SlotInstance{}
	apiUnit := UnitStatus{Unit: "api", Count: 6, Exclusive: true, Held: 1, Free: 3, Failed: 2, Slots: []SlotStatus{
		{Slot: "api/0", Index: 0, State: "held", Node: "n1", Since: t0,
			Instances: []SlotInstance{{Service: "api", ServiceID: "api-0", Node: "n1", State: "running", Health: "passing"}}},
		{Slot: "api/1", Index: 1, State: "failed", Node: "n2", Since: t0.Add(time.Minute), Reason: "reschedules exhausted", Reschedules: 2, Instances: none},
		{Slot: "api/2", Index: 2, State: "lost", Node: "n3", Since: t0,
			Instances: []SlotInstance{{Service: "api", ServiceID: "api-2", Node: "n3", State: "lost", Health: "critical"}}},
		{Slot: "api/3", Index: 3, State: "free", Node: "n1", Since: t0, Reason: "drained", Instances: none},
		{Slot: "api/4", Index: 4, State: "free", Instances: none},
		{Slot: "api/5", Index: 5, State: "corrupt", Reason: "not a mariposa slot value: bad", Instances: none},
	}}
	emptyUnit := UnitStatus{Unit: "empty", Slots: []SlotStatus{}}
	frontUnit := UnitStatus{Unit: "front", Count: 2, Held: 1, Free: 1, Slots: []SlotStatus{
		{Slot: "front/0", Index: 0, State: "held", Node: "n2", Since: t0, Instances: []SlotInstance{
			{Service: "side", ServiceID: "side-0", Node: "n2", State: "starting", Health: "-"},
			{Service: "web", ServiceID: "web-0", Node: "n1", State: "stopping", Health: "-"},
			{Service: "web", ServiceID: "web-0", Node: "n2", State: "running", Health: "passing"},
		}},
		{Slot: "front/1", Index: 1, State: "free", Instances: none},
	}}
	cases := []struct {
		name  string
		only  string
		want  []UnitStatus
		table []string // the table's lines after the header
	}{
		{"all", "", []UnitStatus{apiUnit, emptyUnit, frontUnit}, []string{
			"api    6      1     3     2       0:n1 running/passing, 1:failed, 2:n3 lost, 3:free, 4:free, 5:corrupt",
			"empty  0      0     0     0       -",
			"front  2      1     1     0       0:n2 starting/-+stopping/-@n1+running/passing, 1:free",
		}},
		{"a service unit", "api", []UnitStatus{apiUnit}, nil},
		{"a group by name", "front", []UnitStatus{frontUnit}, nil},
		{"a group by a member", "side", []UnitStatus{frontUnit}, nil},
		{"a service without count", "plain", []UnitStatus{}, nil},
		{"unknown", "nope", []UnitStatus{}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := unitsStatus(st, rows, tc.only)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", asJSON(got), asJSON(tc.want))
			}
			if tc.table == nil {
				return
			}
			lines := strings.Split(unitsTable(got), "\n")
			if want := "UNIT   COUNT  HELD  FREE  FAILED  SLOTS"; lines[0] != want {
				t.Errorf("header %q, want %q", lines[0], want)
			}
			if !reflect.DeepEqual(lines[1:], tc.table) {
				t.Errorf("table:\n%s\nwant rows:\n%s", strings.Join(lines, "\n"), strings.Join(tc.table, "\n"))
			}
		})
	}

	// A held slot before its instance registers.
	st.Slots["front"][1] = cluster.SlotState{Session: "s3", Value: cluster.SlotValue{Node: "n3", State: cluster.SlotHeld}}
	if got := slotCell(unitsStatus(st, nil, "front")[0].Slots[1]); got != "1:n3 held" {
		t.Errorf("a held slot without instances: %q", got)
	}
}

// status -json through the command: a deployed service and group, slots
// held, failed, free and lost, an instance in its slot; and, when the
// fleet's state cannot be read, the instances all the same.
func TestStatusJSONUnits(t *testing.T) {
	agent := consultest.NewDev(t)
	c := agent.Client(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f.hcl")
	if err := os.WriteFile(p, []byte(`
service "api" {
  command = ["sleep", "600"]
  count   = 3
  exclusive = true
}

group "front" {
  count = 1

  service "web" {
    command = ["sleep", "600"]
  }

  service "side" {
    command = ["sleep", "600"]
  }
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
	if _, err := cluster.Deploy(c, spec, cluster.DeployOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}

	since := time.Now().UTC().Truncate(time.Second) // UTC, no monotonic reading: survives JSON as is
	put := func(key string, v cluster.SlotValue, session string) {
		t.Helper()
		b, _ := json.Marshal(v)
		pair := &api.KVPair{Key: key, Value: b, Session: session}
		if session != "" {
			ok, _, err := c.KV().Acquire(pair, nil)
			if err != nil || !ok {
				t.Fatalf("acquire %s: %v %v", key, ok, err)
			}
			return
		}
		if _, err := c.KV().Put(pair, nil); err != nil {
			t.Fatal(err)
		}
	}
	sess, _, err := c.Session().Create(&api.SessionEntry{Name: "test", Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		t.Fatal(err)
	}
	put(cluster.SlotKey("api", 0), cluster.SlotValue{Node: agent.Name, State: cluster.SlotHeld, Since: since}, sess)
	put(cluster.SlotKey("api", 1), cluster.SlotValue{Node: "gone", State: cluster.SlotFailed, Since: since, Reason: "reschedules exhausted",
		Reschedules: []placement.RescheduleEvent{{Node: "gone", At: since}}}, "")
	put(cluster.SlotKey("front", 0), cluster.SlotValue{Node: "gone", State: cluster.SlotHeld, Since: since}, "") // lost

	// The instance in api/0, as mariposa run -cluster registers it.
	id := "api-0"
	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: "api",
		Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue},
		Check: &api.AgentServiceCheck{CheckID: checks.SupervisorCheckID(id), Name: "mariposa supervisor", TTL: "1m",
			Status: api.HealthCritical},
	}); err != nil {
		t.Fatal(err)
	}
	out := report.Encode(report.Instance{State: "running", PID: 7, Reason: "running (pid 7)", Slot: "api/0", Since: since})
	if err := c.Agent().UpdateTTL(checks.SupervisorCheckID(id), out, api.HealthPassing); err != nil {
		t.Fatal(err)
	}

	// The instance of the lost slot front/0, still in the catalog on the
	// node that lost it: nobody reports it any more.
	gone := "web-0"
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "gone", Address: "10.0.0.9",
		Service: &api.AgentService{ID: gone, Service: "web", Meta: map[string]string{checks.ManagedByKey: checks.ManagedByValue}},
		Checks: api.HealthChecks{
			{Node: "gone", CheckID: checks.SupervisorCheckID(gone), ServiceID: gone, Status: api.HealthPassing,
				Output: report.Encode(report.Instance{State: "running", Reason: "running (pid 9)", Slot: "front/0", Since: since})},
			{Node: "gone", CheckID: checks.CheckID(gone, checks.AliveCheckName), ServiceID: gone, Status: api.HealthCritical},
		}}, nil); err != nil {
		t.Fatal(err)
	}

	run := func(addr string, args ...string) string {
		t.Helper()
		ui := cli.NewMockUi()
		if code := (&StatusCommand{UI: ui}).Run(append([]string{"-consul-addr", addr}, args...)); code != 0 {
			t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
		}
		return ui.OutputWriter.String()
	}
	var got StatusOutput
	var raw string
	if !consultest.WaitFor(10*time.Second, func() bool {
		raw = run(agent.HTTPAddr(), "-json")
		got = StatusOutput{}
		return json.Unmarshal([]byte(raw), &got) == nil && len(got.Instances) == 2 && got.Instances[0].State == "running"
	}) {
		t.Fatalf("status -json:\n%s", raw)
	}
	if r := got.Instances[0]; r.ServiceID != id || r.Slot != "api/0" || r.Node != agent.Name {
		t.Errorf("instance: %+v", r)
	}
	if r := got.Instances[1]; r.ServiceID != gone || r.Slot != "front/0" || r.State != "lost" {
		t.Errorf("instance: %+v", r)
	}
	none := []SlotInstance{}
	want := []UnitStatus{
		{Unit: "api", Count: 3, Exclusive: true, Held: 1, Free: 1, Failed: 1, Slots: []SlotStatus{
			{Slot: "api/0", Index: 0, State: "held", Node: agent.Name, Since: since,
				Instances: []SlotInstance{{Service: "api", ServiceID: id, Node: agent.Name, State: "running", Health: "-"}}},
			{Slot: "api/1", Index: 1, State: "failed", Node: "gone", Since: since, Reason: "reschedules exhausted", Reschedules: 1, Instances: none},
			{Slot: "api/2", Index: 2, State: "free", Instances: none},
		}},
		{Unit: "front", Count: 1, Held: 0, Free: 1, Slots: []SlotStatus{
			{Slot: "front/0", Index: 0, State: "lost", Node: "gone", Since: since,
				Instances: []SlotInstance{{Service: "web", ServiceID: gone, Node: "gone", State: "lost", Health: "-"}}},
		}},
	}
	if !reflect.DeepEqual(got.Units, want) || got.Problems != nil {
		t.Errorf("units:\n%s\nwant:\n%s\nproblems: %v", asJSON(got.Units), asJSON(want), got.Problems)
	}
	// The object's shape as data: arrays, never null; no problems key.
	var shape map[string]any
	if err := json.Unmarshal([]byte(raw), &shape); err != nil {
		t.Fatal(err)
	}
	if _, ok := shape["problems"]; ok {
		t.Errorf("problems present with none:\n%s", raw)
	}
	units, _ := shape["units"].([]any)
	slot2, _ := units[0].(map[string]any)["slots"].([]any)[2].(map[string]any)
	if slot2 == nil || slot2["instances"] == nil || slot2["since"] != nil || slot2["node"] != nil {
		t.Errorf("a free slot never claimed: %v", slot2)
	}

	// SERVICE: one unit; a member names its group; a group's name, its
	// members' instances.
	got = StatusOutput{}
	if err := json.Unmarshal([]byte(run(agent.HTTPAddr(), "-json", "side")), &got); err != nil ||
		len(got.Units) != 1 || got.Units[0].Unit != "front" || len(got.Instances) != 0 || len(got.Units[0].Slots[0].Instances) != 0 {
		t.Errorf("status -json side: %+v (%v)", got, err)
	}
	got = StatusOutput{}
	if err := json.Unmarshal([]byte(run(agent.HTTPAddr(), "-json", "front")), &got); err != nil ||
		!reflect.DeepEqual(got.Units, want[1:]) || len(got.Instances) != 1 || got.Instances[0].ServiceID != gone {
		t.Errorf("status -json front: %+v (%v)", got, err)
	}
	if table := run(agent.HTTPAddr(), "front"); !strings.Contains(table, "0:gone lost") || !strings.Contains(table, "web ") {
		t.Errorf("status front:\n%s", table)
	}
	table := run(agent.HTTPAddr(), "api")
	for _, want := range []string{"UNIT", "0:" + agent.Name + " running/-, 1:failed, 2:free"} {
		if !strings.Contains(table, want) {
			t.Errorf("status api lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "front") {
		t.Errorf("status api shows front:\n%s", table)
	}

	// Without key:read (here: a proxy refusing the KV store), the instances
	// all the same, and why the units are missing.
	target, _ := url.Parse("http://" + agent.HTTPAddr())
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/kv/") {
			http.Error(w, "Permission denied", http.StatusForbidden)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	raw = run(srv.URL, "-json")
	got = StatusOutput{}
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Instances) != 2 || got.Units == nil || len(got.Units) != 0 || len(got.Problems) != 1 ||
		!strings.Contains(got.Problems[""], cluster.DeployPrefix) {
		t.Errorf("without the fleet's state:\n%s", raw)
	}
	if table := run(srv.URL); !strings.Contains(table, "api ") || strings.Contains(table, "UNIT") {
		t.Errorf("text without the fleet's state:\n%s", table)
	}
}

// The JSON example of website/commands/status.md is what status prints
// (every key, none missing, none unknown), and its units are the units
// table shown above it.
func TestStatusDocJSON(t *testing.T) {
	b, err := os.ReadFile("../website/commands/status.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, _ := fencedBlocks(string(b), "json")
	if len(blocks) != 1 {
		t.Fatalf("status.md has %d json blocks, want 1", len(blocks))
	}
	dec := json.NewDecoder(strings.NewReader(blocks[0]))
	dec.DisallowUnknownFields()
	var out StatusOutput
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("the example: %v", err)
	}
	if len(out.Instances) == 0 || len(out.Units) == 0 {
		t.Fatalf("the example shows no instance or no unit: %+v", out)
	}
	var doc, back any
	again, _ := json.Marshal(out)
	_ = json.Unmarshal([]byte(blocks[0]), &doc)
	_ = json.Unmarshal(again, &back)
	if !reflect.DeepEqual(doc, back) {
		t.Errorf("the example is not what status prints:\n%s\nstatus would print:\n%s", blocks[0], asJSON(out))
	}
	for _, u := range out.Units {
		n := map[string]int{}
		for _, s := range u.Slots {
			n[s.State]++
		}
		if len(u.Slots) != u.Count || u.Held != n["held"] || u.Free != n["free"]+n["lost"] || u.Failed != n["failed"]+n["corrupt"] {
			t.Errorf("the example's unit %s does not add up: %+v", u.Unit, u)
		}
	}
	texts, _ := fencedBlocks(string(b), "text")
	var shown string
	for _, tx := range texts {
		if strings.HasPrefix(tx, "UNIT ") {
			shown = tx
		}
	}
	if shown == "" {
		t.Fatal("status.md shows no units table")
	}
	rendered := strings.Split(unitsTable(out.Units), "\n")
	if got, want := strings.Fields(rendered[0]), strings.Fields(strings.SplitN(shown, "\n", 2)[0]); !reflect.DeepEqual(got, want) {
		t.Errorf("header %q, status.md shows %q", got, want)
	}
	for _, line := range rendered[1:] {
		found := false
		for _, l := range strings.Split(shown, "\n") {
			if strings.Join(strings.Fields(l), " ") == strings.Join(strings.Fields(line), " ") {
				found = true
			}
		}
		if !found {
			t.Errorf("status.md's units table lacks %q:\n%s", line, shown)
		}
	}
}

func TestCapacityTable(t *testing.T) {
	nodes := []cluster.NodeCapacity{
		{Node: "n1", Live: true, Capacity: &placement.Capacity{Total: placement.Reservation{CPU: 2000, Memory: 2048},
			Reserve: placement.Reservation{Memory: 512}, Local: placement.Reservation{CPU: 100, Memory: 100}},
			Slots: placement.Reservation{CPU: 500, Memory: 512}, Free: placement.Reservation{CPU: 1400, Memory: 924}},
		{Node: "old", Live: false},
	}
	want := "NODE                                    CPU FREE  CPU RESERVED  CPU OFFERED  MEM FREE  MEM RESERVED  MEM OFFERED\n" +
		"n1                                      1400      600           2000         924 MiB   612 MiB       1536 MiB\n" +
		"old (not live) (no capacity: no limit)  -         -             -            -         -             -"
	if got := capacityTable(nodes); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestReservesCapacity(t *testing.T) {
	capa := func(local int) *placement.Capacity {
		return &placement.Capacity{Total: placement.Reservation{CPU: 1000, Memory: 1024}, Local: placement.Reservation{Memory: local}}
	}
	plain := &cluster.State{Units: map[string]cluster.UnitSpec{"web": {Unit: placement.Unit{Name: "web"}}}}
	sized := &cluster.State{Units: map[string]cluster.UnitSpec{"db": {Unit: placement.Unit{Name: "db", Resources: placement.Reservation{Memory: 64}}}}}
	for _, tc := range []struct {
		name  string
		st    *cluster.State
		nodes []cluster.NodeCapacity
		want  bool
	}{
		{"nothing reserves", plain, []cluster.NodeCapacity{{Node: "n1", Capacity: capa(0)}, {Node: "old"}}, false},
		{"a unit with resources", sized, []cluster.NodeCapacity{{Node: "n1", Capacity: capa(0)}}, true},
		{"a node's own services", plain, []cluster.NodeCapacity{{Node: "n1", Capacity: capa(128)}}, true},
	} {
		if got := reservesCapacity(tc.st, tc.nodes); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
