package render

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/schema"
)

// consulTemplateRender renders each template once with the real
// consul-template against addr; nil when it is not built (a failure in CI:
// `make test` builds it, tools/consul-template/build.sh).
func consulTemplateRender(t *testing.T, addr string, texts map[string]string) map[string]string {
	t.Helper()
	bin, err := consulTemplateBinary(t, false)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the cross-check against consul-template cannot run: %v", err)
		}
		t.Logf("%v: skipping the cross-check against consul-template", err)
		return nil
	}
	dir := t.TempDir()
	args := []string{"-once", "-consul-addr", addr, "-log-level", "err"}
	for name, text := range texts {
		in, out := filepath.Join(dir, name+".tpl"), filepath.Join(dir, name+".out")
		mustWrite(t, in, text)
		args = append(args, "-template", in+":"+out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_TOKEN=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("consul-template: %v\n%s", err, out)
	}
	got := map[string]string{}
	for name := range texts {
		got[name] = readFile(t, filepath.Join(dir, name+".out"))
	}
	return got
}

type docExample struct {
	name, text, want string
}

// TestConsulTemplateDocExamples renders the examples of consul-template's
// docs/templating-language.md (verbatim where they are complete templates)
// and checks the result against the documented output and, when it is
// installed, against consul-template itself on the same data.
//
// Where the documentation's sample output is loose, want is what
// consul-template really renders: `service` prints .Name, the service name
// ("web"), where the docs show node-like names; `tree` prints Key:Value in
// key order; `ls` keeps the template's indentation and blank lines.
func TestConsulTemplateDocExamples(t *testing.T) {
	a, c := newAgent(t)
	m := startManager(t, a.HTTPAddr())
	node := a.Name

	// Phase 1, an empty KV store: the defaults and the else branches.
	run(t, m, a.HTTPAddr(), "empty", []docExample{
		{"keyOrDefault", `{{ keyOrDefault "service/redis/maxconns" "5" }}`, "5"},
		{"keyExists", `{{ if keyExists "app/beta_active" }}beta{{ else }}stable{{ end }}`, "stable"},
		{"keyExistsDoc", "{{ if keyExists \"app/beta_active\" }}\n  # ...\n{{ else }}\n  # ...\n{{ end }}", "\n  # ...\n"},
	})

	for k, v := range map[string]string{
		"service/redis/maxconns": "15",
		"service/redis/minconns": "5",
		"user/info":              `{"name": "Alice"}`,
		"user/name":              "Alice Smith",
		"foo":                    "line1\nline2",
		"config/admin/port":      "1234",
		"config/maxconns":        "5",
		"config/minconns":        "2",
		"app/beta_active":        "true",
	} {
		put(t, c, k, v)
	}
	for i, addr := range []string{"10.5.2.45", "10.2.6.61"} {
		err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
			ID: fmt.Sprintf("web0%d", i+1), Name: "web", Address: addr, Port: []int{2492, 2904}[i],
			Tags: []string{"tag1", "tag2", "tag3"},
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	run(t, m, a.HTTPAddr(), "data", []docExample{
		{"key", `{{ key "service/redis/maxconns" }}`, "15"},
		{"keyOrDefault", `{{ keyOrDefault "service/redis/maxconns" "5" }}`, "15"},
		{"keyExists", `{{ if keyExists "app/beta_active" }}beta{{ else }}stable{{ end }}`, "beta"},
		{"ls", "{{ range ls \"service/redis\" }}\n  {{ .Key }}:{{ .Value }}\n{{ end }}", "\n  maxconns:15\n\n  minconns:5\n"},
		{"service", "{{ range service \"web\" }}\nserver {{ .Name }} {{ .Address }}:{{ .Port }}{{ end }}",
			"\nserver web 10.5.2.45:2492\nserver web 10.2.6.61:2904"},
		{"serviceAny", `{{ range service "web|any" }}{{ .ID }} {{ end }}`, "web01 web02 "},
		{"serviceTag", `{{ range service "tag2.web" }}{{ .Address }} {{ end }}`, "10.5.2.45 10.2.6.61 "},
		{"services", "{{ range services }}\n{{ .Name }}: {{ .Tags | join \",\" }}{{ end }}", "\nconsul: \nweb: tag1,tag2,tag3"},
		{"node", "{{ with node }}\n{{ .Node.Address }}{{ end }}", "\n127.0.0.1"},
		{"nodeNamed", `{{ with node "` + node + `" }}{{ .Node.Node }}{{ end }}`, node},
		{"nodes", "{{ range nodes }}\n{{ .Address }}{{ end }}", "\n127.0.0.1"},
		{"contains", "{{ range service \"web\" }}{{ if .Tags | contains \"tag2\" }}\n# {{ .ID }}\n{{ end }}{{ end }}", "\n# web01\n\n# web02\n"},
		{"join", `{{ $items := split "," "a,b,c" }}{{ $items | join "," }}`, "a,b,c"},
		{"parseJSON", `{{ with $d := key "user/info" | parseJSON }}{{ $d.name }}{{ end }}`, "Alice"},
		{"replaceAll", `{{ "foo.bar" | replaceAll "." "_" }}`, "foo_bar"},
		{"split", `{{ "foo\nbar\n" | split "\n" }}`, "[foo bar]"},
		{"splitChain", `{{ key "foo" | toUpper | split "\n" | join "," }}`, "LINE1,LINE2"},
		{"toJSON", `{{ tree "config" | explode | toJSON }}`, `{"admin":{"port":"1234"},"maxconns":"5","minconns":"2"}`},
		{"toLower", `{{ key "user/name" | toLower }}`, "alice smith"},
		{"toUpper", `{{ key "user/name" | toUpper }}`, "ALICE SMITH"},
		{"sprig", `{{ "hello" | sprig_upper | sprig_repeat 2 }}`, "HELLOHELLO"},
		{"env", `{{ env "MARIPOSA_DOC_GREETING" }}`, "hi"},
	})

	// The tree example's data.
	put(t, c, "service/redis/maxconns", "12")
	put(t, c, "service/redis/minconns", "2")
	put(t, c, "service/redis/nested/config/value", `"value"`)
	run(t, m, a.HTTPAddr(), "tree", []docExample{
		{"tree", "{{ range tree \"service/redis\" }}\n{{ .Key }}:{{ .Value }}{{ end }}", "\nmaxconns:12\nminconns:2\nnested/config/value:\"value\""},
		{"ls", `{{ range ls "service/redis" }}{{ .Key }} {{ end }}`, "maxconns minconns "},
		{"safeTree", `{{ range safeTree "service/redis" }}{{ .Key }} {{ end }}`, "maxconns minconns nested/config/value "},
	})

	// safeLs and safeTree refuse an empty prefix: they wait, as key does.
	dir := t.TempDir()
	svc := templateService(dir, "safe", `{{ range safeLs "empty/prefix" }}{{ .Key }}{{ end }}`)
	f := follow(m.Service(svc))
	f.until(t, "safeLs to wait", func(s ServiceState) bool {
		return s.Waiting == `waiting: template safe-a.conf needs keys under "empty/prefix"`
	})
	put(t, c, "empty/prefix/now", "x")
	f.until(t, "safeLs to render", func(s ServiceState) bool { return s.TemplatesReady })
}

// run renders examples in one service and compares them with want and with
// consul-template.
func run(t *testing.T, m *Manager, addr, phase string, examples []docExample) {
	t.Helper()
	t.Setenv("MARIPOSA_DOC_GREETING", "hi")
	dir := t.TempDir()
	svc := &schema.Service{Name: phase, Dir: dir, SourceDir: dir}
	texts := map[string]string{}
	for _, ex := range examples {
		svc.Templates = append(svc.Templates, &schema.Template{
			Contents: ex.text, Destination: filepath.Join(dir, ex.name+".out"), Perms: 0o644,
		})
		texts[ex.name] = ex.text
	}
	f := follow(m.Service(svc))
	f.until(t, phase+" examples", func(s ServiceState) bool { return s.TemplatesReady || len(s.Errors) > 0 })
	if st := f.last; len(st.Errors) > 0 {
		t.Fatalf("%s: %q", phase, st.Errors)
	}
	theirs := consulTemplateRender(t, addr, texts)
	names := make([]string, 0, len(examples))
	for _, ex := range examples {
		names = append(names, ex.name)
		got := readFile(t, filepath.Join(dir, ex.name+".out"))
		if got != ex.want {
			t.Errorf("%s/%s: %s\nrendered %q\n    want %q", phase, ex.name, ex.text, got, ex.want)
		}
		if theirs != nil && theirs[ex.name] != got {
			t.Errorf("%s/%s: consul-template renders %q, mariposa %q", phase, ex.name, theirs[ex.name], got)
		}
	}
	sort.Strings(names)
	if theirs != nil {
		t.Logf("%s: %s render as consul-template %s renders them", phase, strings.Join(names, ", "), consulTemplateVersion)
	}
	m.Remove(svc)
}
