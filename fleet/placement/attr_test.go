package placement

import (
	"strings"
	"testing"
	"time"

	"github.com/mariposa-sh/mariposa/schema"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// node returns a live, eligible node with meta from "k=v" pairs.
func node(name string, meta ...string) NodeInfo {
	n := NodeInfo{Name: name, Datacenter: "dc1", MariposaVersion: "1.4.2", Fleet: true, Live: true, Eligible: true,
		Meta: map[string]string{}, Services: map[string]int{}}
	for _, kv := range meta {
		k, v, _ := strings.Cut(kv, "=")
		n.Meta[k] = v
	}
	return n
}

func TestAttr(t *testing.T) {
	n := node("web-1", "zone=z1", "empty=")
	n.Services["db"] = 2
	n.Services["gone"] = 0
	cases := []struct {
		attr  string
		value string
		set   bool
		err   bool
	}{
		{"node.name", "web-1", true, false},
		{"${node.name}", "web-1", true, false},
		{" node.datacenter ", "dc1", true, false},
		{"mariposa.version", "1.4.2", true, false},
		{"node.meta.zone", "z1", true, false},
		{"node.meta.empty", "", true, false},
		{"node.meta.rack", "", false, false},
		{"service.db", "2", true, false},
		{"service.gone", "", false, false},
		{"service.web", "", false, false},
		{"node.meta.", "", false, true},
		{"service.", "", false, true},
		{"node.class", "", false, true},
		{"", "", false, true},
		{"${}", "", false, true},
	}
	for _, c := range cases {
		v, set, err := Attr(n, c.attr)
		if v != c.value || set != c.set || (err != nil) != c.err {
			t.Errorf("Attr(%q) = %q, %v, %v; want %q, %v, err %v", c.attr, v, set, err, c.value, c.set, c.err)
		}
	}
	// Nil maps and an empty node.
	if _, set, err := Attr(NodeInfo{}, "node.meta.x"); set || err != nil {
		t.Errorf("empty node: set %v err %v", set, err)
	}
	if _, set, err := Attr(NodeInfo{}, "node.name"); set || err != nil {
		t.Errorf("empty node name: set %v err %v", set, err)
	}
}

func TestOperators(t *testing.T) {
	n := node("web-1", "zone=z1", "tags=a, b,c", "empty=")
	n.MariposaVersion = "1.4.2"
	n.Services["db"] = 2
	dev := node("dev")
	dev.MariposaVersion = "dev"
	cases := []struct {
		n        NodeInfo
		attr, op string
		value    string
		ok       bool
		reason   string // substring of the verdict's reason when !ok
	}{
		{n, "node.meta.zone", "==", "z1", true, ""},
		{n, "node.meta.zone", "=", "z1", true, ""},
		{n, "node.meta.zone", "==", "z2", false, `node.meta.zone = "z1" fails == "z2"`},
		{n, "node.meta.rack", "==", "r1", false, `node.meta.rack not set fails == "r1"`},
		{n, "node.meta.zone", "!=", "z3", true, ""},
		{n, "node.meta.zone", "!=", "z1", false, `node.meta.zone = "z1" fails != "z1"`},
		{n, "node.meta.rack", "!=", "r1", true, ""}, // missing passes != (Nomad)
		{n, "node.meta.empty", "==", "", true, ""},
		{n, "node.name", "regexp", "^web-[0-9]+$", true, ""},
		{n, "node.name", "regexp", "eb", true, ""}, // unanchored, as Nomad
		{n, "node.name", "regexp", "^db", false, `node.name = "web-1" fails regexp "^db"`},
		{n, "node.meta.rack", "regexp", ".*", false, "not set"},
		{n, "node.name", "regexp", "(", false, `node.name: invalid regexp "("`},
		{n, "mariposa.version", "version", ">= 1.2, < 2", true, ""},
		{n, "mariposa.version", "version", "~> 1.4.0", true, ""},
		{n, "mariposa.version", "version", ">= 1.5", false, `mariposa.version = "1.4.2" fails version ">= 1.5"`},
		{dev, "mariposa.version", "version", ">= 1.0", false, `mariposa.version = "dev" fails`},
		{n, "mariposa.version", "version", "not a version", false, "invalid version constraint"},
		{n, "node.meta.rack", "version", ">= 1", false, "not set"},
		{n, "node.meta.tags", "set_contains", "a,c", true, ""},
		{n, "node.meta.tags", "set_contains", " b ", true, ""},
		{n, "node.meta.tags", "set_contains", "a,d", false, `fails set_contains "a,d"`},
		{n, "node.meta.rack", "set_contains", "a", false, "not set"},
		{n, "node.meta.zone", "is_set", "", true, ""},
		{n, "node.meta.rack", "is_set", "", false, "node.meta.rack not set fails is_set"},
		{n, "node.meta.rack", "is_not_set", "", true, ""},
		{n, "node.meta.zone", "is_not_set", "", false, `node.meta.zone = "z1" fails is_not_set`},
		// service.<name>: co-location and anti-co-location.
		{n, "service.db", "==", "", true, ""},
		{n, "service.db", "==", "2", true, ""},
		{n, "service.db", "==", "1", false, `service.db = "2" fails == "1"`},
		{n, "service.cache", "==", "", false, "service.cache not set fails =="},
		{n, "service.cache", "!=", "", true, ""},
		{n, "service.db", "!=", "", false, `service.db = "2" fails !=`},
		{n, "service.db", "is_set", "", true, ""},
		// Broken rules fail the node with a reason, never panic.
		{n, "node.class", "==", "x", false, `unknown attribute "node.class"`},
		{n, "node.meta.zone", "<", "z2", false, `unknown operator "<"`},
		{n, "node.meta.zone", "", "z1", false, `unknown operator ""`},
	}
	for _, c := range cases {
		con := &schema.Constraint{Attribute: c.attr, Operator: c.op, Value: c.value, Pos: "a.hcl:4:3"}
		u := Unit{Name: "api", Placement: &schema.Placement{Count: 1, Constraints: []*schema.Constraint{con}}}
		got := Feasible(u, c.n, 0, View{})
		if got.OK != c.ok {
			t.Errorf("%s %s %q on %s: OK %v (%s), want %v", c.attr, c.op, c.value, c.n.Name, got.OK, got.Reason, c.ok)
			continue
		}
		if c.ok {
			continue
		}
		if got.Filter != FilterConstraint || got.Constraint != con {
			t.Errorf("%s %s %q: filter %q constraint %v", c.attr, c.op, c.value, got.Filter, got.Constraint)
		}
		if !strings.Contains(got.Reason, c.reason) || !strings.HasSuffix(got.Reason, " (a.hcl:4:3)") {
			t.Errorf("%s %s %q: reason %q, want it to contain %q and end with the position", c.attr, c.op, c.value, got.Reason, c.reason)
		}
	}
}

func TestReasonExample(t *testing.T) {
	con := &schema.Constraint{Attribute: "node.meta.zone", Operator: "!=", Value: "z3", Pos: "a.hcl:4:3"}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 3, Constraints: []*schema.Constraint{con}}}
	got := Feasible(u, node("web-3", "zone=z3"), 0, View{})
	if want := `node.meta.zone = "z3" fails != "z3" (a.hcl:4:3)`; got.Reason != want {
		t.Errorf("reason %q, want %q", got.Reason, want)
	}
	con.Pos = ""
	got = Feasible(u, node("web-3", "zone=z3"), 0, View{})
	if want := `node.meta.zone = "z3" fails != "z3"`; got.Reason != want {
		t.Errorf("reason without position %q, want %q", got.Reason, want)
	}
}
