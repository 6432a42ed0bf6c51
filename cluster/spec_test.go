package cluster

import (
	"github.com/hashicorp/consul/api"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

func TestReifyAndDecode(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/tmpl.ctmpl", "port {{ env \"PORT\" }}")
	p := &schema.Placement{Count: 3, MaxPerNode: 1, Reschedule: schema.Reschedule{Delay: 5 * time.Second}}
	cfg := &schema.Config{Services: []*schema.Service{
		{Name: "api", Command: []string{"api"}, Placement: p, SourceFile: dir + "/a.hcl", SourceDir: dir,
			Templates: []*schema.Template{{Source: "tmpl.ctmpl", Destination: "/tmp/x"}}},
		{Name: "web", Group: "front", Command: []string{"web"}, Placement: &schema.Placement{Count: 2}},
		{Name: "side", Group: "front", Command: []string{"side"}, Placement: &schema.Placement{Count: 2}},
	}, Groups: []*schema.Group{{Name: "front", Services: []string{"web", "side"}}}}
	for _, svc := range cfg.Services {
		updateDefaults(svc.Placement, map[*schema.Placement]bool{}) // as the language gives every unit
	}
	sp, err := Reify("shop", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := sp.Services[0].Templates[0]; got.Source != "" || got.Contents != "port {{ env \"PORT\" }}" {
		t.Errorf("template not inlined: %+v", got)
	}
	if sp.Services[0].SourceDir != "" || cfg.Services[0].Templates[0].Source == "" {
		t.Error("reify kept machine paths or changed the loaded config")
	}
	b, err := sp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if HashOf(back) != sp.Hash {
		t.Error("the hash does not survive a round trip")
	}
	units := back.Units()
	if len(units) != 2 || units[0].Unit.Name != "api" || units[1].Unit.Name != "front" || len(units[1].Services) != 2 {
		t.Fatalf("units %+v", units)
	}

	// Again with another deployer and time: the same hash.
	sp2, _ := Reify("shop", cfg)
	if sp2.Hash != sp.Hash {
		t.Error("the hash depends on more than what runs")
	}

	// A service without a count cannot be deployed.
	cfg.Services = append(cfg.Services, &schema.Service{Name: "plain", Command: []string{"x"}, SourceFile: "b.hcl"})
	if _, err := Reify("shop", cfg); err == nil || !strings.Contains(err.Error(), `service "plain" has no count`) {
		t.Errorf("reify of a service without count: %v", err)
	}
	if _, err := Reify("bad name", &schema.Config{}); err == nil {
		t.Error("a deployment name with a space was accepted")
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":     `{`,
		"no name":      `{"services":[{"Command":["x"],"Placement":{"Count":1}}]}`,
		"no command":   `{"services":[{"Name":"a","Placement":{"Count":1}}]}`,
		"no placement": `{"services":[{"Name":"a","Command":["x"]}]}`,
		"negative":     `{"services":[{"Name":"a","Command":["x"],"Placement":{"Count":-1}}]}`,
		"duplicate":    `{"services":[{"Name":"a","Command":["x"],"Placement":{"Count":1}},{"Name":"a","Command":["x"],"Placement":{"Count":1}}]}`,
		"null check":   `{"services":[{"Name":"a","Command":["x"],"Placement":{"Count":1},"Checks":[null]}]}`,
		"null service": `{"services":[null]}`,
	} {
		if _, err := DecodeSpec([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSlotKeysAndValues(t *testing.T) {
	for key, want := range map[string]struct {
		unit string
		k    int
		ok   bool
	}{
		"mariposa/slots/api/2":  {"api", 2, true},
		"mariposa/slots/a/b/10": {"a/b", 10, true},
		"mariposa/slots/api/02": {"", 0, false},
		"mariposa/slots/api/-1": {"", 0, false},
		"mariposa/slots/api":    {"", 0, false},
		"mariposa/slots//1":     {"", 0, false},
		"mariposa/other/api/1":  {"", 0, false},
		"mariposa/slots/api/1x": {"", 0, false},
	} {
		u, k, ok := parseSlotKey(key)
		if ok != want.ok || (ok && (u != want.unit || k != want.k)) {
			t.Errorf("%s: %q %d %v", key, u, k, ok)
		}
	}
	if _, err := DecodeSlotValue([]byte(`{"state":"weird"}`)); err == nil {
		t.Error("unknown state accepted")
	}
	if v, err := DecodeSlotValue(nil); err != nil || v.State != "" {
		t.Error("empty value")
	}
	v := SlotValue{Node: "n1", State: SlotReleased, Since: time.Unix(1, 0).UTC()}
	if back, err := DecodeSlotValue(v.encode()); err != nil || back.Node != "n1" || back.State != SlotReleased {
		t.Errorf("round trip: %+v %v", back, err)
	}
	if _, _, err := ParseSlot("api"); err == nil {
		t.Error("ParseSlot without /K")
	}
	if u, k, err := ParseSlot("api/3"); err != nil || u != "api" || k != 3 {
		t.Error("ParseSlot api/3")
	}
}

// FuzzDecode: anything read from Consul under mariposa/ decodes or fails,
// never panics, and a decoded spec's units can be listed.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"services":[{"Name":"a","Command":["x"],"Placement":{"Count":1}}]}`))
	f.Add([]byte(`{"node":"n","state":"held","reschedules":[{"node":"n"}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"at":"2026-11-23T10:00:00Z","node":"n1","vanished":["n2","n3"],"base":4}`))
	f.Add([]byte(`{"takeovers":[{"slot":"api/1","node":"n1","from":"n2","at":"2026-11-23T10:00:00Z"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if sp, err := DecodeSpec(b); err == nil {
			_ = sp.Units()
			_ = HashOf(sp)
		}
		_, _ = DecodeSlotValue(b)
		if r, err := DecodeStormRecord(b); err == nil {
			_ = r.Reason()
		}
		_, l := parseControl(api.KVPairs{{Key: StormKey, Value: b}, {Key: TakeoversKey, Value: b}}, func(string, string, error) {})
		_, _ = l.with(Takeover{}).allows("", time.Time{}, 1)
	})
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReferencedServices(t *testing.T) {
	units := map[string]UnitSpec{
		"a": {Unit: placement.Unit{Name: "a", Placement: &schema.Placement{Count: 1,
			Constraints: []*schema.Constraint{{Attribute: "service.db", Operator: "is_set"}, {Attribute: "node.name", Operator: "==", Value: "x"}},
			Affinities:  []*schema.Affinity{{Attribute: "${service.cache}", Operator: "==~"}}}}},
		"b": {Unit: placement.Unit{Name: "b"}},
	}
	if got := referencedServices(units); len(got) != 2 || got[0] != "cache" || got[1] != "db" {
		t.Fatalf("referenced %v", got)
	}
	nodes := withServices([]placement.NodeInfo{{Name: "n1"}, {Name: "n2"}}, map[string]map[string]int{"db": {"n2": 2}})
	if len(nodes[0].Services) != 0 || nodes[1].Services["db"] != 2 {
		t.Fatalf("nodes %+v", nodes)
	}
	if v, set, _ := placement.Attr(nodes[1], "service.db"); !set || v != "2" {
		t.Errorf("service.db on n2: %q %v", v, set)
	}
}

// TestNewerSpecFormat: a spec written by a newer mariposa is reported by
// the node and not run; older specs (no format) still are.
func TestNewerSpecFormat(t *testing.T) {
	body := `"name":"shop","n":7,"hash":"h","services":[{"Name":"api","Command":["x"],"Placement":{"Count":1}}]`
	for _, tc := range []struct {
		format string
		ok     bool
	}{{"", true}, {`"format":1,`, true}, {`"format":2,`, true}, {`"format":3,`, true}, {`"format":4,`, false}} {
		b := []byte("{" + tc.format + body + "}")
		_, err := DecodeSpec(b)
		if (err == nil) != tc.ok {
			t.Fatalf("format %q: %v", tc.format, err)
		}
		if !tc.ok && !strings.Contains(err.Error(), "spec 7 of \"shop\" was written by a newer mariposa (spec format 4; this mariposa reads up to 3)") {
			t.Fatalf("format %q: %v", tc.format, err)
		}
		var reported []string
		specs := parseDeploy(api.KVPairs{
			{Key: DesiredKey("shop"), Value: []byte(`{"n":7,"hash":"h"}`)},
			{Key: SpecKey("shop", 7), Value: b},
		}, func(key, msg string, err error) { reported = append(reported, key+": "+msg) })
		if (specs["shop"] != nil) != tc.ok || (len(reported) == 0) == !tc.ok {
			t.Fatalf("format %q: specs %v, reported %q", tc.format, specs, reported)
		}
	}
}

// TestOldSpecUpdateDefaults: a spec written before the update block
// existed decodes with the block's defaults; one with a block keeps it.
func TestOldSpecUpdateDefaults(t *testing.T) {
	old, err := DecodeSpec([]byte(`{"name":"shop","services":[{"Name":"api","Command":["x"],"Placement":{"Count":1}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if u := old.Services[0].Placement.Update; u.MaxParallel != 1 || u.HealthCheck != schema.UpdateChecks ||
		u.HealthyDeadline != schema.DefaultUpdateHealthyDeadline || u.MinHealthyTime != schema.DefaultUpdateMinHealthyTime {
		t.Fatalf("old spec's update: %+v", u)
	}
	set, err := DecodeSpec([]byte(`{"name":"shop","services":[{"Name":"api","Command":["x"],"Placement":{"Count":1,
		"Update":{"MaxParallel":0,"HealthCheck":"running","HealthyDeadline":60000000000}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if u := set.Services[0].Placement.Update; u.MaxParallel != 0 || u.HealthCheck != "running" {
		t.Fatalf("a spec's own update block changed: %+v", u)
	}
}

// TestSpecFormatOf: a spec is written with the oldest format that holds
// it: 2 only with a coordinated template, so nodes not upgraded yet run
// every other spec.
func TestSpecFormatOf(t *testing.T) {
	plain := &Spec{Services: []*schema.Service{{Name: "api", Templates: []*schema.Template{{Destination: "a"}}}}}
	coord := &Spec{Services: []*schema.Service{{Name: "api", Templates: []*schema.Template{{Destination: "a",
		Coordinate: &schema.Coordinate{MaxParallel: 1}}}}}}
	vol := &Spec{Services: []*schema.Service{{Name: "db", Placement: &schema.Placement{Count: 1, Volumes: []*schema.Volume{{Name: "data"}}}}}}
	if formatOf(plain) != 1 || formatOf(coord) != 2 || formatOf(vol) != 3 {
		t.Fatalf("formats %d %d %d", formatOf(plain), formatOf(coord), formatOf(vol))
	}
}
