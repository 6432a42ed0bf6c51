package schema

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// defaultReschedule is Reschedule with every default applied.
var defaultReschedule = Reschedule{
	Unlimited:     true,
	Delay:         5 * time.Second,
	DelayFunction: DelayExponential,
	MaxDelay:      5 * time.Minute,
	Penalty:       30 * time.Minute,
}

// defaultUpdate is Update with every default applied: Nomad's.
var defaultUpdate = Update{
	MaxParallel:      1,
	HealthCheck:      "checks",
	MinHealthyTime:   10 * time.Second,
	HealthyDeadline:  5 * time.Minute,
	ProgressDeadline: 10 * time.Minute,
}

// TestPlacementDecoded decodes testdata/valid/cluster.hcl into the expected
// Placement values, defaults included.
func TestPlacementDecoded(t *testing.T) {
	const file = "testdata/valid/cluster.hcl"
	cfg := mustLoad(t, LoadOptions{}, file)
	pos := func(line int) string { return fmt.Sprintf("%s:%d:3", file, line) }

	search := &Placement{
		Count: 3,
		Constraints: []*Constraint{
			{Attribute: "node.meta.zone", Operator: OpNotEqual, Value: "z3", Pos: pos(8)},
			{Attribute: "mariposa.version", Operator: OpVersion, Value: ">= 0.2, < 1", Pos: pos(14)},
			{Attribute: "node.meta.disks", Operator: OpSetContains, Value: "ssd,nvme", Pos: pos(20)},
			{Attribute: "node.meta.gpu", Operator: OpIsNotSet, Pos: pos(26)},
			{Attribute: "node.datacenter", Operator: OpEqual, Value: "dc1", Pos: pos(31)},
		},
		Affinities: []*Affinity{
			{Attribute: "node.meta.disk", Operator: OpPrefer, Value: "ssd", Weight: 80, Pos: pos(37)},
			{Attribute: "service.mysql", Operator: OpAvoid, Weight: 50, Pos: pos(44)},
		},
		Spreads: []*Spread{
			{Attribute: "node.meta.zone", Weight: 70, Pos: pos(49),
				Targets: []SpreadTarget{{Value: "z1", Percent: 50}, {Value: "z2", Percent: 30}}},
			{Attribute: "node.datacenter", Weight: 50, Pos: pos(62)},
		},
		MaxPerNode:         2,
		StopAfter:          30 * time.Second,
		SchedulerAlgorithm: AlgorithmSpread,
		Reschedule: Reschedule{
			Attempts:      5,
			Interval:      time.Hour,
			Delay:         10 * time.Second,
			DelayFunction: DelayFibonacci,
			MaxDelay:      10 * time.Minute,
			Penalty:       time.Hour,
			NodeLostAfter: time.Minute,
		},
		Update: Update{
			MaxParallel:     2,
			HealthCheck:     UpdateRunning,
			MinHealthyTime:  30 * time.Second,
			HealthyDeadline: 2 * time.Minute,
			Canary:          1,
			AutoPromote:     true,
			AutoRevert:      true,
		},
	}
	scheduler := &Placement{
		Count: 1,
		Constraints: []*Constraint{
			{Attribute: "node.name", Operator: OpRegexp, Value: "^sched-[0-9]+$", Pos: pos(102)},
		},
		MaxPerNode: 1,
		Exclusive:  true,
		Reschedule: defaultReschedule,
		Update:     defaultUpdate,
	}
	shopResched := defaultReschedule
	shopResched.Unlimited, shopResched.Attempts, shopResched.Interval = false, 2, 30*time.Minute
	shopUpdate := defaultUpdate
	shopUpdate.HealthCheck, shopUpdate.AutoRevert = UpdateManual, true
	shop := &Placement{
		Count:       2,
		Constraints: []*Constraint{{Attribute: "service.redis", Operator: OpEqual, Pos: pos(113)}},
		Affinities:  []*Affinity{{Attribute: "node.meta.rack", Operator: OpPrefer, Value: "r1", Weight: 50, Pos: pos(117)}},
		MaxPerNode:  1,
		Reschedule:  shopResched,
		Update:      shopUpdate,
	}

	for _, tt := range []struct {
		service string
		want    *Placement
	}{
		{"search", search},
		{"scheduler", scheduler},
		{"shop", shop},
		{"shop-worker", shop},
	} {
		got := cfg.Service(tt.service).Placement
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s.Placement:\n got  %s\n want %s", tt.service, dumpPlacement(got), dumpPlacement(tt.want))
		}
	}
	if got := cfg.Service("search").Restart.OnExhausted; got != "reschedule" {
		t.Errorf("search on_exhausted = %q", got)
	}
	if got := cfg.Service("shop").Restart.OnExhausted; got != "reschedule" {
		t.Errorf("shop on_exhausted = %q", got)
	}

	// The group's placement is one value, shared by every member.
	var g *Group
	for _, x := range cfg.Groups {
		if x.Name == "shop" {
			g = x
		}
	}
	if g == nil || g.Placement == nil {
		t.Fatalf("group shop: %+v", g)
	}
	if cfg.Service("shop").Placement != g.Placement || cfg.Service("shop-worker").Placement != g.Placement {
		t.Errorf("members do not share the group's Placement pointer")
	}

	// Services and groups without count have none.
	other := mustLoad(t, LoadOptions{}, "testdata/valid/web.hcl", "testdata/valid/group.hcl")
	for _, s := range other.Services {
		if s.Placement != nil {
			t.Errorf("%s has a Placement without count: %+v", s.Name, s.Placement)
		}
	}
	for _, g := range other.Groups {
		if g.Placement != nil {
			t.Errorf("group %s has a Placement without count", g.Name)
		}
	}
}

func dumpPlacement(p *Placement) string {
	if p == nil {
		return "nil"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "{Count:%d MaxPerNode:%d Exclusive:%v StopAfter:%s Reschedule:%+v Update:%+v", p.Count, p.MaxPerNode, p.Exclusive, p.StopAfter, p.Reschedule, p.Update)
	for _, c := range p.Constraints {
		fmt.Fprintf(&b, " Constraint%+v", *c)
	}
	for _, a := range p.Affinities {
		fmt.Fprintf(&b, " Affinity%+v", *a)
	}
	for _, s := range p.Spreads {
		fmt.Fprintf(&b, " Spread%+v", *s)
	}
	return b.String() + "}"
}

// TestPlacementDefaults: count alone gives every default, and the
// expressions of the language work in placement arguments.
func TestPlacementDefaults(t *testing.T) {
	cfg, diags := loadSrc(t, t.TempDir(), `
variable "replicas" {
  default = 4
}
variable "zone_attr" {
  default = "node.meta.zone"
}

service "a" {
  command = ["a"]
  count   = var.replicas
}

service "b" {
  command = ["b"]
  count   = "2"

  constraint {
    attribute = var.zone_attr
    operator  = "=="
    value     = 3
  }
  spread {
    attribute = "${var.zone_attr}"
  }
  affinity {
    attribute = "node.name"
    operator  = "regexp"
    value     = "^b-"
  }
}
`, LoadOptions{Environ: []string{}})
	if diags.Len() != 0 || cfg == nil {
		t.Fatalf("diagnostics: %s", diags.Error())
	}
	want := &Placement{Count: 4, MaxPerNode: 1, Reschedule: defaultReschedule, Update: defaultUpdate}
	if got := cfg.Service("a").Placement; !reflect.DeepEqual(got, want) {
		t.Errorf("a.Placement = %s, want %s", dumpPlacement(got), dumpPlacement(want))
	}
	b := cfg.Service("b").Placement
	if b == nil || b.Count != 2 || len(b.Constraints) != 1 || b.Constraints[0].Value != "3" ||
		len(b.Spreads) != 1 || b.Spreads[0].Attribute != "node.meta.zone" ||
		len(b.Affinities) != 1 || b.Affinities[0].Operator != OpRegexp || b.Affinities[0].Weight != DefaultAffinityWeight {
		t.Errorf("b.Placement = %s", dumpPlacement(b))
	}
	if !strings.HasSuffix(b.Constraints[0].Pos, ".hcl:18:3") {
		t.Errorf("constraint Pos = %q", b.Constraints[0].Pos)
	}
}

// TestRescheduleUnlimited: attempts turns unlimited off unless it is set
// too; attempts or interval with unlimited draws a warning.
func TestRescheduleUnlimited(t *testing.T) {
	for _, tt := range []struct {
		body      string
		unlimited bool
		warnings  []string
	}{
		{``, true, nil},
		{`delay = "1s"`, true, nil},
		{"attempts = 0", false, nil},
		{"attempts = 3\n    interval = \"1h\"", false, nil},
		{"unlimited = false", false, nil},
		{"unlimited = true\n    attempts  = 3\n    interval  = \"1h\"", true, []string{"attempts not used"}},
		{`interval = "1h"`, true, []string{"interval not used"}},
		{"unlimited = false\n    interval  = \"1h\"", false, nil},
	} {
		src := "service \"s\" {\n  command = [\"s\"]\n  count   = 1\n  reschedule {\n    " + tt.body + "\n  }\n}\n"
		cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
		if cfg == nil {
			t.Errorf("%q: %s", tt.body, diags.Error())
			continue
		}
		if got := cfg.Service("s").Placement.Reschedule.Unlimited; got != tt.unlimited {
			t.Errorf("%q: unlimited = %v, want %v", tt.body, got, tt.unlimited)
		}
		var warnings []string
		for _, d := range diags.All() {
			warnings = append(warnings, d.Summary)
		}
		if !reflect.DeepEqual(warnings, tt.warnings) {
			t.Errorf("%q: warnings %q, want %q", tt.body, warnings, tt.warnings)
		}
	}
}

// TestPlacementDetails checks what the new diagnostics say, beyond their
// summaries (which the golden files check): the suggestions above all.
func TestPlacementDetails(t *testing.T) {
	tests := []struct {
		body string // inside service "s" { command = ["s"] count = 2 ... }
		want string
	}{
		{`constraint {
    attribute = "node.metadata.zone"
    value     = "a"
  }`, `Did you mean "node.meta.zone"?`},
		{`constraint {
    attribute = "meta.zone"
    value     = "a"
  }`, `Did you mean "node.meta.zone"?`},
		{`constraint {
    attribute = "node.datacentre"
    value     = "a"
  }`, `Did you mean "node.datacenter"?`},
		{`constraint {
    attribute = "services.mysql"
  }`, `Did you mean "service.mysql"?`},
		{`affinity {
    attribute = "nodes.meta.rack"
    value     = "a"
  }`, `Did you mean "node.meta.rack"?`},
		{`constraint {
    attribute = "${node.unique.name}"
    value     = "a"
  }`, `without Nomad's ${...}: write attribute = "node.name".`},
		{`constraint {
    attribute = "${node.datacenter}"
    value     = "a"
  }`, `write attribute = "node.datacenter".`},
		{`constraint {
    attribute = "node.name"
    operator  = "regex"
    value     = "a"
  }`, `Did you mean "regexp"?`},
		{`constraint {
    attribute = "node.name"
    operator  = "is_sett"
  }`, `Did you mean "is_set"?`},
		{`constraint {
    attribute = "mariposa.version"
    operator  = ">="
    value     = "1.2"
  }`, `compare versions with "version"`},
		{`constraint {
    attribute = "node.meta.zone"
    operator  = "!=~"
    value     = "a"
  }`, `Use an affinity block for a soft preference, or "!=" for a hard one`},
		{`affinity {
    attribute = "node.meta.zone"
    operator  = "==!"
    value     = "a"
  }`, `"==~", "!=~", "==", "!=", "regexp"`},
		{`affinity {
    attribute = "node.meta.zone"
    operator  = "!=~"
    value     = "a"
    weight    = -10
  }`, `operator = "==~"`},
		{`constraint {
    attribute = "node.name"
    operator  = "regexp"
    value     = "a(("
  }`, "error parsing regexp: missing closing ): `a((`"},
		{`constraint {
    attribute = "mariposa.version"
    operator  = "version"
    value     = "latest"
  }`, `"latest" is not a version constraint: malformed constraint: latest.`},
		{`constraint {
    attribute = "node.meta.zone"
  }`, `use operator = "is_set"`},
		{`spread {
    attribute = "node.meta.zone"
    target {
      percent = 50
    }
  }`, `target "eu-west-1a" { percent = 50 }`},
		{`constraint {
    distinct_hosts = true
  }`, `An argument named "distinct_hosts" is not expected here. Instances already run on distinct nodes: max_per_node defaults to 1.`},
		{`leader {}`, `set count = 1 and exclusive = true`},
		{`exclusive  = true
  stop_after = "1m"`, `exclusive = true already stops an instance`},
	}
	for _, tt := range tests {
		src := "service \"s\" {\n  command = [\"s\"]\n  count   = 2\n  " + tt.body + "\n}\n"
		_, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
		if !diags.HasErrors() {
			t.Errorf("%s: no error", tt.body)
			continue
		}
		if !strings.Contains(diags.Error(), tt.want) {
			t.Errorf("%s: diagnostics lack %q:\n%s", tt.body, tt.want, diags.Error())
		}
	}

	// Without count: one error, at the first placement item, naming them all.
	_, diags := loadSrc(t, t.TempDir(), `service "s" {
  command = ["s"]
  spread {
    attribute = "node.meta.zone"
  }
  max_per_node = 2
}
`, LoadOptions{Environ: []string{}})
	all := diags.All()
	if len(all) != 1 || all[0].Range.Start.Line != 3 ||
		!strings.Contains(all[0].Detail, `spread and max_per_node only apply to a cluster unit`) ||
		!strings.Contains(all[0].Detail, `Add count = N to service "s"`) {
		t.Errorf("diagnostics %+v", all)
	}
}
