package plan

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/schema"
)

// planSpec loads body as dir/a.hcl (the same path each time, as a file
// edited between deploys) and reifies it as deployment "default".
func planSpec(t *testing.T, dir, body string) *cluster.Spec {
	t.Helper()
	p := filepath.Join(dir, "a.hcl")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := schema.Load([]string{p}, schema.LoadOptions{Environ: []string{}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	sp, err := cluster.Reify("default", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// stored is sp as deploy stored it, as spec n, read back.
func stored(t *testing.T, sp *cluster.Spec, n uint64) *cluster.Spec {
	t.Helper()
	c := *sp
	c.N, c.By = n, "me@here"
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := cluster.DecodeSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

const planAPI = `
service "api" {
  command = ["app", "-v1"]
  count   = 3
  env     = { MODE = "a", KEEP = "k" }
  check "http" {
    http = "http://localhost:8080/health"
  }
}
`

const planWeb = `
group "web" {
  count = 2
  service "app" {
    command = ["app"]
  }
  service "side" {
    command = ["side"]
  }
}
`

// unitWant is what a test expects of one unit of a plan.
type unitWant struct {
	change   string
	diffs    []string // diffText of each, newline-less
	added    int
	removed  []string
	replace  string
	services []string
	rollout  string // the JSON of Rollout, when set
}

func TestNewPlan(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cur, next string // cur "": no deployment yet
		want      map[string]unitWant
		text      []string // lines Text must hold
	}{{
		name: "add",
		next: planAPI,
		want: map[string]unitWant{"api": {change: ChangeAdd, added: 3, replace: ReplaceNone}},
		text: []string{"Deployment default has no spec yet; deploy would write spec 1 (", "+ api: count 3, 3 slots added: api/0, api/1, api/2",
			"Plan: 1 unit to add, 0 to change, 0 to remove; 3 slots added, 0 removed; 0 instances replaced."},
	}, {
		name: "remove",
		cur:  planAPI + planWeb,
		next: planWeb,
		want: map[string]unitWant{
			"api": {change: ChangeRemove, removed: []string{"api/0", "api/1", "api/2"}, replace: ReplaceNone},
			"web": {change: ChangeNone, replace: ReplaceNone},
		},
		text: []string{"- api: count 3, 3 slots removed: api/0, api/1, api/2; their instances stop", "  web: no change"},
	}, {
		name: "count up",
		cur:  planAPI,
		next: strings.Replace(planAPI, "count   = 3", "count   = 5", 1),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{"~ api.count: 3 -> 5"}, added: 2, replace: ReplaceNone}},
		text: []string{"~ api\n    ~ api.count: 3 -> 5\n  2 slots added: api/3, api/4\n  replaces: none (placement only)\n"},
	}, {
		name: "count down",
		cur:  planAPI,
		next: strings.Replace(planAPI, "count   = 3", "count   = 2", 1),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{"~ api.count: 3 -> 2"}, removed: []string{"api/2"}, replace: ReplaceNone}},
		text: []string{"  1 slot removed: api/2\n", "Plan: 0 units to add, 1 to change, 0 to remove; 0 slots added, 1 removed; 0 instances replaced."},
	}, {
		name: "command",
		cur:  planAPI,
		next: strings.Replace(planAPI, `"-v1"`, `"-v2"`, 1),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{`~ api.command: ["app", "-v1"] -> ["app", "-v2"]`},
			replace: ReplaceAll, services: []string{"api"}}},
		text: []string{"  replaces: every instance (api/0, api/1, api/2), in 3 batches of 1\n",
			"3 instances replaced."},
	}, {
		name: "env",
		cur:  planAPI,
		next: strings.Replace(planAPI, `{ MODE = "a", KEEP = "k" }`, `{ MODE = "b", KEEP = "k", "x.y" = "1" }`, 1),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{`~ api.env.MODE: "a" -> "b"`, `+ api.env."x.y": "1"`},
			replace: ReplaceAll, services: []string{"api"}}},
	}, {
		name: "check added, one changed",
		cur:  planAPI,
		next: strings.Replace(planAPI, "  check \"http\" {\n", "  check \"tcp\" {\n    tcp = \"localhost:8080\"\n  }\n  check \"http\" {\n    interval = \"5s\"\n", 1),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{`+ api.check "tcp"`, `~ api.check "http".interval: 10s -> 5s`},
			replace: ReplaceAll, services: []string{"api"}}},
	}, {
		name: "group member changed",
		cur:  planWeb,
		next: strings.Replace(planWeb, `["app"]`, `["app", "-v2"]`, 1),
		want: map[string]unitWant{"web": {change: ChangeChange, diffs: []string{`~ web.app.command: ["app"] -> ["app", "-v2"]`},
			replace: ReplaceAll, services: []string{"app"}}},
		text: []string{"  replaces: web.app in every slot (web/0, web/1), in 2 batches of 1\n"},
	}, {
		name: "group member added and removed",
		cur:  planWeb,
		next: strings.Replace(planWeb, `"side"`, `"metrics"`, 2),
		want: map[string]unitWant{"web": {change: ChangeChange, diffs: []string{"- web.side", "+ web.metrics"}, replace: ReplaceNone}},
		text: []string{"  replaces: none\n  starts: web.metrics in every slot\n  stops: web.side in every slot\n"},
	}, {
		name: "service becomes a group",
		cur:  strings.Replace(planAPI, "count   = 3", "count   = 2", 1),
		next: "group \"api\" {\n  count = 2\n  service \"app\" {\n    command = [\"app\"]\n  }\n}\n",
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{`- api.id: ""`, `- api.command: ["app", "-v1"]`, `- api.dir: ""`, `- api.env`,
			`- api.port: 0`, `- api.address: ""`, `- api.tags: []`, `- api.meta`, `- api.version: ""`, `- api.user: ""`, `- api.group: ""`, `- api.no_new_privs: false`, `- api.check "http"`,
			`- api.restart`, `- api.stop`, `+ api.app`},
			replace: ReplaceAll, services: []string{"app"}}},
	}, {
		name: "placement only",
		cur:  planAPI,
		next: strings.Replace(planAPI, "  count   = 3\n", "  count   = 3\n  max_per_node = 2\n  exclusive = true\n  constraint {\n    attribute = \"node.meta.zone\"\n    value = \"z1\"\n  }\n  reschedule {\n    delay = \"10s\"\n  }\n", 1),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{
			`+ api.constraint "node.meta.zone"`, "~ api.max_per_node: 1 -> 2", "~ api.exclusive: false -> true", "~ api.reschedule.delay: 5s -> 10s"},
			replace: ReplaceNone}},
		text: []string{"  replaces: none (placement only)\n"},
	}, {
		name: "update block only",
		cur:  planAPI,
		next: strings.Replace(planAPI, "  count   = 3\n", "  count   = 3\n  update {\n    max_parallel = 2\n  }\n", 1),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{"~ api.update.max_parallel: 1 -> 2"}, replace: ReplaceNone}},
		text: []string{"  replaces: none (placement only)\n"},
	}, {
		name: "rollout with canary",
		cur:  strings.Replace(planAPI, "count   = 3", "count   = 6", 1),
		next: strings.NewReplacer("count   = 3\n", "count   = 6\n  update {\n    max_parallel = 2\n    canary = 1\n    auto_promote = true\n  }\n", `"-v1"`, `"-v2"`).Replace(planAPI),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{`~ api.update.max_parallel: 1 -> 2`, `~ api.update.canary: 0 -> 1`,
			`~ api.update.auto_promote: false -> true`, `~ api.command: ["app", "-v1"] -> ["app", "-v2"]`},
			replace: ReplaceAll, services: []string{"api"}, rollout: `{"max_parallel":2,"canary":1,"auto_promote":true,"batches":3}`}},
		text: []string{"  replaces: every instance (api/0..api/5), 1 canary first, then after their health (auto_promote) in 3 batches of 2\n"},
	}, {
		name: "rollout all at once",
		cur:  planAPI,
		next: strings.NewReplacer("count   = 3\n", "count   = 3\n  update {\n    max_parallel = 0\n  }\n", `"-v1"`, `"-v2"`).Replace(planAPI),
		want: map[string]unitWant{"api": {change: ChangeChange, diffs: []string{`~ api.update.max_parallel: 1 -> 0`, `~ api.command: ["app", "-v1"] -> ["app", "-v2"]`},
			replace: ReplaceAll, services: []string{"api"}, rollout: `{"max_parallel":0,"canary":0,"auto_promote":false,"batches":1}`}},
		text: []string{"  replaces: every instance (api/0, api/1, api/2), all at once (update.max_parallel = 0)\n"},
	}, {
		name: "identical",
		cur:  planAPI + planWeb,
		next: planAPI + planWeb,
		want: map[string]unitWant{"api": {change: ChangeNone, replace: ReplaceNone}, "web": {change: ChangeNone, replace: ReplaceNone}},
		text: []string{"No changes. Deployment default is at spec 7 ("},
	}, {
		name: "order only",
		cur:  planAPI + planWeb,
		next: planWeb + planAPI,
		want: map[string]unitWant{"api": {change: ChangeNone, replace: ReplaceNone}, "web": {change: ChangeNone, replace: ReplaceNone}},
		text: []string{"No unit changes: the files differ from spec 7 only in form"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var cur *cluster.Spec
			if tc.cur != "" {
				cur = stored(t, planSpec(t, dir, tc.cur), 7)
			}
			next := planSpec(t, dir, tc.next)
			p := NewPlan(cur, next)
			if len(p.Units) != len(tc.want) {
				t.Fatalf("%d units, want %d: %+v", len(p.Units), len(tc.want), p.Units)
			}
			for _, u := range p.Units {
				w, ok := tc.want[u.Unit]
				if !ok {
					t.Errorf("unexpected unit %q", u.Unit)
					continue
				}
				var diffs []string
				for _, d := range u.Diffs {
					diffs = append(diffs, strings.TrimSuffix(diffText(d), "\n"))
				}
				removed := w.removed
				if removed == nil {
					removed = []string{}
				}
				if u.Change != w.change || !reflect.DeepEqual(diffs, w.diffs) || u.SlotsAdded != w.added ||
					!reflect.DeepEqual(u.SlotsRemoved, removed) || u.Replace != w.replace || !reflect.DeepEqual(u.ReplaceServices, w.services) {
					t.Errorf("%s: %s %q +%d -%v replace %s %v\nwant %s %q +%d -%v replace %s %v", u.Unit,
						u.Change, diffs, u.SlotsAdded, u.SlotsRemoved, u.Replace, u.ReplaceServices,
						w.change, w.diffs, w.added, removed, w.replace, w.services)
				}
				if w.rollout != "" {
					if b, _ := json.Marshal(u.Rollout); string(b) != w.rollout {
						t.Errorf("%s: rollout %s, want %s", u.Unit, b, w.rollout)
					}
				}
			}
			wantChanges := cur == nil || cur.Hash != next.Hash
			if p.Changes != wantChanges || (cur != nil && p.Next.N != map[bool]uint64{true: 8, false: 7}[wantChanges]) {
				t.Errorf("changes %v, next n %d", p.Changes, p.Next.N)
			}
			text := p.Text()
			for _, w := range tc.text {
				if !strings.Contains(text, w) {
					t.Errorf("the text lacks %q:\n%s", w, text)
				}
			}
		})
	}
}

// The positions of placement blocks are in the spec (and its hash) but
// shown only when nothing else changed.
func TestPlanPositions(t *testing.T) {
	dir := t.TempDir()
	base := `
service "api" {
  command = ["app"]
  count   = 2
  constraint {
    attribute = "node.meta.zone"
    value     = "z1"
  }
}
`
	cur := stored(t, planSpec(t, dir, base), 1)
	moved := planSpec(t, dir, strings.Replace(base, "  count   = 2\n", "\n  count   = 2\n", 1))
	p := NewPlan(cur, moved)
	if !p.Changes || len(p.Units[0].Diffs) != 1 || !strings.Contains(p.Text(), `~ api.constraint "node.meta.zone".pos: "`) ||
		!strings.Contains(p.Text(), "replaces: none (placement only)") {
		t.Fatalf("moved only:\n%s", p.Text())
	}
	both := planSpec(t, dir, strings.Replace(base, "  count   = 2\n", "\n  count   = 2\n  tags = [\"x\"]\n", 1))
	p = NewPlan(cur, both)
	if len(p.Units[0].Diffs) != 2 || strings.Contains(p.Text(), ".pos") || !strings.Contains(p.Text(), `~ api.tags: [] -> ["x"]`) {
		t.Fatalf("moved and changed:\n%s", p.Text())
	}
}

// A template's contents are diffed line by line.
func TestPlanTemplateContents(t *testing.T) {
	dir := t.TempDir()
	tmpl := func(body string) string {
		return "service \"api\" {\n  command = [\"app\"]\n  count = 1\n  template {\n    contents = <<EOT\n" + body + "EOT\n    destination = \"/tmp/app.conf\"\n  }\n}\n"
	}
	cur := stored(t, planSpec(t, dir, tmpl("a = 1\nb = 2\nc = 3\n")), 1)
	next := planSpec(t, dir, tmpl("a = 1\nb = 20\nc = 3\nd = 4\n"))
	text := NewPlan(cur, next).Text()
	want := "    ~ api.template \"/tmp/app.conf\".contents:\n        - b = 2\n        + b = 20\n        + d = 4\n"
	if !strings.Contains(text, want) {
		t.Fatalf("text:\n%s\nwant\n%s", text, want)
	}
}

// The JSON: the plan of record decodes as the spec deploy would write,
// with its hash, and each diff's values are plain JSON.
func TestPlanJSON(t *testing.T) {
	dir := t.TempDir()
	cur := stored(t, planSpec(t, dir, planAPI), 4)
	next := planSpec(t, dir, strings.Replace(planAPI, `"-v1"`, `"-v2"`, 1))
	b, err := json.Marshal(NewPlan(cur, next))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Deployment string
		Current    *SpecRef
		Next       struct {
			N    uint64
			Hash string
			Spec json.RawMessage
		}
		Units []struct {
			Unit, Change, Replace string
			Diffs                 []map[string]any
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Deployment != "default" || got.Current == nil || got.Current.N != 4 || got.Current.Hash != cur.Hash ||
		got.Next.N != 5 || got.Next.Hash != next.Hash {
		t.Fatalf("%s", b)
	}
	sp, err := cluster.DecodeSpec(got.Next.Spec)
	if err != nil || cluster.HashOf(sp) != next.Hash || sp.N != 5 {
		t.Fatalf("the plan of record: %v %+v", err, sp)
	}
	if len(got.Units) != 1 || got.Units[0].Replace != "all" || len(got.Units[0].Diffs) != 1 ||
		!reflect.DeepEqual(got.Units[0].Diffs[0], map[string]any{"path": "api.command", "from": []any{"app", "-v1"}, "to": []any{"app", "-v2"}}) {
		t.Fatalf("units: %s", b)
	}
}

func TestPlanHelpers(t *testing.T) {
	for in, want := range map[string]string{"MaxPerNode": "max_per_node", "SessionTTL": "session_ttl", "ID": "id",
		"TTL": "ttl", "DeregisterCriticalAfter": "deregister_critical_after", "Env": "env"} {
		if got := snake(in); got != want {
			t.Errorf("snake(%s) = %s, want %s", in, got, want)
		}
	}
	if got := mergeKeys([]string{"a", "b", "c", "d"}, []string{"a", "c", "e"}); !reflect.DeepEqual(got, []string{"a", "b", "c", "d", "e"}) {
		t.Errorf("mergeKeys: %v", got)
	}
	if got := mergeKeys([]string{"x", "a"}, []string{"a"}); !reflect.DeepEqual(got, []string{"x", "a"}) {
		t.Errorf("mergeKeys: %v", got)
	}
	if got := NewPlan(nil, &cluster.Spec{Name: "x", Hash: "h"}).Text(); got != "Deployment x has no spec yet; deploy would write spec 1 (h).\n\nThe files declare no unit: deploy would write an empty spec.\n" {
		t.Errorf("empty: %q", got)
	}
	if got := slotRange(slotNames("api", 2, 9)); got != "api/2..api/8" {
		t.Errorf("slotRange: %s", got)
	}
	for _, tc := range []struct {
		r    *Rollout
		want string
	}{
		{rolloutOf(&schema.Placement{Update: schema.Update{MaxParallel: 1}}, 3), "in 3 batches of 1"},
		{rolloutOf(&schema.Placement{Update: schema.Update{MaxParallel: 5}}, 3), "in 1 batch of 5"},
		{rolloutOf(&schema.Placement{Update: schema.Update{MaxParallel: 1, Canary: 2}}, 2), "as 2 canaries, then a promotion"},
		{rolloutOf(&schema.Placement{Update: schema.Update{MaxParallel: 0, Canary: 2}}, 2), "all at once (update.max_parallel = 0)"},
		{nil, "all at once"},
	} {
		if got := rolloutText(tc.r); got != tc.want {
			t.Errorf("rolloutText(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
