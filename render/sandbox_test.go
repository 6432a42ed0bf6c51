package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul-template/config"
	dep "github.com/hashicorp/consul-template/dependency"
	ctemplate "github.com/hashicorp/consul-template/template"
)

// execute renders text as a mariposa template would, with data from brain,
// and fails the test on missing data.
func execute(t *testing.T, sb *sandbox, brain *ctemplate.Brain, text string) (string, error) {
	t.Helper()
	if err := CheckTemplate(text); err != nil {
		return "", err
	}
	ct, err := ctemplate.NewTemplate(&ctemplate.NewTemplateInput{
		Contents: text, ExtFuncMap: sb.funcs(), ReaderFunc: config.Reader(os.ReadFile),
	})
	if err != nil {
		t.Fatal(err)
	}
	if brain == nil {
		brain = ctemplate.NewBrain()
	}
	res, err := ct.Execute(&ctemplate.ExecuteInput{Brain: brain})
	if err != nil {
		return "", err
	}
	if res.Missing.Len() > 0 {
		t.Fatalf("missing data: %s", describeAll(res.Missing.List()))
	}
	return string(res.Output), nil
}

func newSandbox(t *testing.T) (*sandbox, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "svc")
	if err := os.MkdirAll(filepath.Join(root, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, "conf", "inside.txt"), "inside")
	mustWrite(t, filepath.Join(base, "secret.txt"), "secret")
	return &sandbox{root: root, env: map[string]string{"GREETING": "hello"}, maxFile: 1 << 20}, base
}

func mustWrite(t testing.TB, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileInsideSandbox(t *testing.T) {
	sb, _ := newSandbox(t)
	for _, p := range []string{"conf/inside.txt", "./conf/../conf/inside.txt", filepath.Join(sb.root, "conf/inside.txt")} {
		out, err := execute(t, sb, nil, `{{ file "`+p+`" }}`)
		if err != nil || out != "inside" {
			t.Errorf("file %q = %q, %v; want the file's contents", p, out, err)
		}
	}
	// A symlink that stays inside is fine.
	if err := os.Symlink("conf/inside.txt", filepath.Join(sb.root, "link")); err != nil {
		t.Fatal(err)
	}
	if out, err := execute(t, sb, nil, `{{ file "link" }}`); err != nil || out != "inside" {
		t.Errorf("inside symlink: %q, %v", out, err)
	}
}

func TestSandboxEscapes(t *testing.T) {
	sb, base := newSandbox(t)
	if err := os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(sb.root, "out-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(sb.root, "out-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../secret.txt", filepath.Join(sb.root, "conf", "rel-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent/x", filepath.Join(sb.root, "dangling")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, text, want string
	}{
		{"dotdot", `{{ file "../secret.txt" }}`, "outside the service directory"},
		{"dotdot deep", `{{ file "conf/../../secret.txt" }}`, "outside the service directory"},
		{"absolute", `{{ file "/etc/passwd" }}`, "outside the service directory"},
		{"absolute sibling", `{{ file "` + filepath.Join(base, "secret.txt") + `" }}`, "outside the service directory"},
		{"symlink out", `{{ file "out-link" }}`, "outside the service directory"},
		{"symlinked dir", `{{ file "out-dir/secret.txt" }}`, "outside the service directory"},
		{"relative symlink out", `{{ file "conf/rel-link" }}`, "outside the service directory"},
		{"dangling symlink out", `{{ file "dangling" }}`, "outside the service directory"},
		{"missing", `{{ file "conf/nope" }}`, `file "conf/nope": no such file or directory`},
		{"directory", `{{ file "conf" }}`, "not a regular file"},
		{"plugin", `{{ plugin "/bin/sh" "-c" "id" }}`, `function "plugin" is not available`},
		{"plugin in untaken branch", `{{ if false }}{{ "x" | plugin "evil" }}{{ end }}`, `function "plugin" is not available`},
		{"writeToFile", `{{ writeToFile "/tmp/x" "" "" "0644" "data" }}`, `function "writeToFile" is not available`},
		{"executeTemplate", `{{ define "t" }}x{{ end }}{{ executeTemplate "t" }}`, `function "executeTemplate" is not available`},
		{"vault", `{{ with secret "secret/x" }}{{ end }}`, `function "secret" is not available`},
		{"nomad", `{{ range nomadServices }}{{ end }}`, `function "nomadServices" is not available`},
		{"sprig env", `{{ sprig_env "HOME" }}`, `function "sprig_env" not defined`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := execute(t, sb, nil, c.text)
			if err == nil {
				t.Fatalf("rendered %q; want an error containing %q", out, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q; want it to contain %q", err, c.want)
			}
		})
	}
}

func TestRemovedFunctionsRefusedAtExecution(t *testing.T) {
	// Even if the parse check were bypassed, the functions are replaced:
	// consul-template's own map has live Vault and Nomad functions, a
	// plugin runner and a file writer under these names.
	sb, _ := newSandbox(t)
	for name := range removed {
		t.Run(name, func(t *testing.T) {
			text := `{{ ` + name + ` "x" }}`
			ct, err := ctemplate.NewTemplate(&ctemplate.NewTemplateInput{Contents: text, ExtFuncMap: sb.funcs()})
			if err != nil {
				t.Fatal(err)
			}
			res, err := ct.Execute(&ctemplate.ExecuteInput{Brain: ctemplate.NewBrain()})
			want := removedErr(name).Error()
			if err == nil || !strings.Contains(err.Error(), want) {
				var missing string
				if res != nil {
					missing = describeAll(res.Missing.List())
				}
				t.Fatalf("%s ran or failed unclearly: %v (waiting for %q); want %q", name, err, missing, want)
			}
		})
	}
}

func TestDataIsNeverATemplate(t *testing.T) {
	sb, _ := newSandbox(t)
	brain := ctemplate.NewBrain()
	d, err := dep.NewKVGetQuery("app/value")
	if err != nil {
		t.Fatal(err)
	}
	d.EnableBlocking()
	evil := `{{ file "../secret.txt" }}{{ plugin "x" }}{{ key "other" }}`
	brain.Remember(d, evil)
	out, err := execute(t, sb, brain, `v={{ key "app/value" }}`)
	if err != nil {
		t.Fatal(err)
	}
	if out != "v="+evil {
		t.Fatalf("got %q; want the value literally", out)
	}
}

func TestEnvFunctions(t *testing.T) {
	sb, _ := newSandbox(t)
	t.Setenv("MARIPOSA_RENDER_TEST", "from-process")
	t.Setenv("CONSUL_HTTP_TOKEN", "s3cret")
	out, err := execute(t, sb, nil, `{{ env "GREETING" }} {{ env "MARIPOSA_RENDER_TEST" }} [{{ env "CONSUL_HTTP_TOKEN" }}] {{ envOrDefault "NOPE_NOT_SET" "dflt" }}`)
	if err != nil {
		t.Fatal(err)
	}
	if out != "hello from-process [] dflt" {
		t.Fatalf("got %q", out)
	}
	if _, err := execute(t, sb, nil, `{{ mustEnv "CONSUL_HTTP_TOKEN" }}`); err == nil {
		t.Fatal("mustEnv revealed the token")
	}
}

func TestParseError(t *testing.T) {
	if err := CheckTemplate(`{{ range service "web" }}`); err == nil {
		t.Fatal("unterminated range accepted")
	}
}

func TestDescribe(t *testing.T) {
	mk := func(d dep.Dependency, err error) dep.Dependency {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	kv, _ := dep.NewKVGetQuery("app/config")
	kv.EnableBlocking()
	cases := map[string]dep.Dependency{
		`key "app/config"`:        kv,
		`keys under "app/"`:       mk(dep.NewKVListQuery("app/")),
		`service "primary.mysql"`: mk(dep.NewHealthServiceQuery("primary.mysql")),
		`service "web"`:           mk(dep.NewHealthServiceQuery("web|any")),
		`the service list`:        mk(dep.NewCatalogServicesQuery("")),
		`the node list`:           mk(dep.NewCatalogNodesQuery("")),
		`this node`:               mk(dep.NewCatalogNodeQuery("")),
		`node "n1"`:               mk(dep.NewCatalogNodeQuery("n1")),
	}
	for want, d := range cases {
		if got := describe(d); got != want {
			t.Errorf("describe(%s) = %q; want %q", d, got, want)
		}
	}
	ds := []dep.Dependency{kv, mk(dep.NewKVListQuery("b/")), mk(dep.NewHealthServiceQuery("web")), mk(dep.NewCatalogNodesQuery(""))}
	if got, want := describeAll(ds), `key "app/config", keys under "b/", service "web" and 1 more`; got != want {
		t.Errorf("describeAll = %q; want %q", got, want)
	}
}

func TestParseEnv(t *testing.T) {
	env, err := parseEnv([]byte("# comment\n\nA=1\nexport B = two words \nC=\"quoted\"\nD='x=y'\r\nE=\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "B=two words", "C=quoted", "D=x=y", "E="}
	if !equalStrings(env, want) {
		t.Fatalf("got %q; want %q", env, want)
	}
	for _, bad := range []string{"novalue\n", "1A=x\n", "A-B=x\n"} {
		if _, err := parseEnv([]byte(bad)); err == nil {
			t.Errorf("parseEnv(%q) accepted", bad)
		}
	}
}

// TestHelperExamples keeps the helper examples of website/templates.md honest.
func TestHelperExamples(t *testing.T) {
	sb, _ := newSandbox(t)
	cases := map[string]string{
		`{{ range loop 3 }}{{ . }}{{ end }}`:                                        "012",
		`{{ add 1 2 }}`:                                                             "3",
		`{{ "foo.bar" | regexReplaceAll "foo([.a-z]+)" "$1" }}`:                     ".bar",
		`{{ "foo.bar" | replaceAll "." "_" }}`:                                      "foo_bar",
		`{{ scratch.Set "k" 1 }}{{ scratch.Get "k" }}`:                              "1",
		`{{ "foo\nbar\n" | split "\n" }}`:                                           "[foo bar]",
		`{{ $items := split "," "a,b,c" }}{{ $items | join "," }}`:                  "a,b,c",
		`{{ "hello" | sprig_upper | sprig_repeat 2 }}`:                              "HELLOHELLO",
		`{{ "Alice Smith" | toUpper }} {{ "Alice Smith" | toLower }}`:               "ALICE SMITH alice smith",
		`{{ if "a,b" | split "," | contains "b" }}yes{{ end }}`:                     "yes",
		`{{ with $d := "{\"name\":\"Alice\"}" | parseJSON }}{{ $d.name }}{{ end }}`: "Alice",
	}
	for text, want := range cases {
		if got, err := execute(t, sb, nil, text); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", text, got, err, want)
		}
	}
}
