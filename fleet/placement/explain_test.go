package placement

import (
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/schema"
)

func TestExplain(t *testing.T) {
	zone := &schema.Constraint{Attribute: "node.meta.zone", Operator: "!=", Value: "z3", Pos: "a.hcl:4:3"}
	u := Unit{Name: "api", Placement: &schema.Placement{Count: 3, Constraints: []*schema.Constraint{zone},
		Affinities: []*schema.Affinity{{Attribute: "node.meta.disk", Operator: "==~", Value: "ssd", Weight: 50}}}}
	v := View{Nodes: []NodeInfo{node("web1", "zone=z1", "disk=ssd"), node("web2", "zone=z3"), node("web3", "zone=z2")},
		Load: map[string]int{"web3": 2, "web1": 0, "other": 4}}
	// The example in Explain's doc comment.
	want := "api/2: 2 of 3 nodes feasible\n" +
		"RANK  NODE  TOTAL   AFFINITY  SPREAD  ANTI-AFF  PENALTY  STICKY  LOAD    CAPACITY  VERDICT\n" +
		"0     web1  0.333   1.000     -       0.000     -        -       0.000   -         ok\n" +
		"1     web3  -0.167  0.000     -       0.000     -        -       -0.500  -         ok\n" +
		"-     web2                                                                         node.meta.zone = \"z3\" fails != \"z3\" (a.hcl:4:3)\n"
	if got := Explain("api", 2, Rank(u, 2, v, t0)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := Explain("api", 0, nil); got != "api/0: 0 of 0 nodes feasible\n" {
		t.Errorf("empty: %q", got)
	}
	// A reason quoting user text stays on its row.
	rs := []Ranked{{Node: "a", Rank: -1, Verdict: Verdict{Reason: "node.meta.x = \"a\nb\" fails"}}}
	if got := Explain("api", 0, rs); strings.Count(got, "\n") != 3 || !strings.HasSuffix(got, "  node.meta.x = \"a b\" fails\n") {
		t.Errorf("multi-line reason:\n%s", got)
	}
	if num(-0.0001) != "0.000" || num(-0.5) != "-0.500" {
		t.Errorf("num: %q %q", num(-0.0001), num(-0.5))
	}
}
