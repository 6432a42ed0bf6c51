package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// section returns the text of the markdown section that starts at the
// heading line, up to the next heading of its level or above.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	at := strings.Index(md, "\n"+heading+"\n")
	if at < 0 {
		t.Fatalf("no %q section", heading)
	}
	level := strings.Index(heading, " ")
	rest := md[at+len(heading)+2:]
	for _, l := range strings.SplitAfter(rest, "\n") {
		if strings.HasPrefix(l, "#") {
			if n := strings.Index(l, " "); n > 0 && n <= level && strings.Trim(l[:n], "#") == "" {
				return rest[:strings.Index(rest, l)]
			}
		}
	}
	return rest
}

// The metrics list of website/operations.md is the registry: every
// mariposa_* metric, with its type and labels, and nothing else.
func TestDocsListTheRegistry(t *testing.T) {
	b, err := os.ReadFile("../website/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	list := section(t, string(b), "### List")
	row := regexp.MustCompile("(?m)^\\| `(mariposa_[a-z_]+)` \\| ([a-z]+) \\|\\s*([a-z_, ]*?)\\s*\\| (.+) \\|$")
	documented := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(list, -1) {
		if _, dup := documented[m[1]]; dup {
			t.Errorf("%s is listed twice", m[1])
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		documented[m[1]] = append([]string{m[2]}, labels...)
	}
	if len(documented) == 0 {
		t.Fatal("no metric rows in the list")
	}
	for _, i := range New(Sources{}).Catalog() {
		d, ok := documented[i.Name]
		if !ok {
			t.Errorf("%s is not in website/operations.md's list", i.Name)
			continue
		}
		delete(documented, i.Name)
		if d[0] != i.Type || !slices.Equal(d[1:], i.Labels) {
			t.Errorf("%s: documented as %s %v, registered as %s %v", i.Name, d[0], d[1:], i.Type, i.Labels)
		}
	}
	for n := range documented {
		t.Errorf("website/operations.md lists %s, which the registry does not have", n)
	}
}

// The Grafana dashboard is JSON Grafana imports (panels with Prometheus
// targets), and every series it queries is a metric of the registry, with
// labels it has.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../website/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string
		UID        string
		Templating struct {
			List []struct {
				Name       string
				Type       string
				Definition string
			}
		}
		Panels []struct {
			ID      int
			Title   string
			Type    string
			GridPos struct{ H, W, X, Y int }
			Targets []struct {
				Expr  string
				RefID string
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) < 8 {
		t.Fatalf("dashboard %q (%s): %d panels", d.Title, d.UID, len(d.Panels))
	}
	cat := map[string]Info{}
	for _, i := range New(Sources{}).Catalog() {
		cat[i.Name] = i
	}
	// The labels a scrape adds: job and instance, and node from the
	// documented relabelling.
	scrape := []string{"job", "instance", "node"}
	series := regexp.MustCompile(`\b(mariposa_[a-z_]+)(\{[^}]*\})?`)
	matcher := regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)`)
	check := func(where, expr string) int {
		n := 0
		for _, m := range series.FindAllStringSubmatch(expr, -1) {
			n++
			name := m[1]
			info, ok := cat[name]
			extra := []string(nil)
			if !ok {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if base, cut := strings.CutSuffix(name, suf); cut && cat[base].Type == "histogram" {
						info, ok = cat[base], true
						if suf == "_bucket" {
							extra = []string{"le"}
						}
					}
				}
			}
			if !ok {
				t.Errorf("%s: %s is not a registered metric", where, name)
				continue
			}
			for _, lm := range matcher.FindAllStringSubmatch(m[2], -1) {
				if l := lm[1]; !slices.Contains(info.Labels, l) && !slices.Contains(scrape, l) && !slices.Contains(extra, l) {
					t.Errorf("%s: %s has no label %q", where, name, l)
				}
			}
		}
		return n
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or taken", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.Type == "" || p.GridPos.W == 0 || p.GridPos.H == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %+v is incomplete", p)
		}
		for _, tg := range p.Targets {
			if check(p.Title, tg.Expr) == 0 {
				t.Errorf("panel %q: %q queries no mariposa metric", p.Title, tg.Expr)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			check("variable "+v.Name, v.Definition)
		}
	}
}
