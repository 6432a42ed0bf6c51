package render

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/schema"
)

func TestCheckTemplate(t *testing.T) {
	tests := []struct {
		name         string
		text         string
		summary      string // "" means the text parses
		message      string
		line, column int
		length       int
		hint         string
	}{
		{"valid", "{{ range service \"web\" }}{{ .Address }}:{{ .Port }}\n{{ end }}{{ key \"a\" | toUpper }}", "", "", 0, 0, 0, ""},
		{"valid sprig and define", `{{ define "x" }}{{ sprig_upper "a" }}{{ end }}{{ template "x" }}{{ with scratch }}{{ end }}`, "", "", 0, 0, 0, ""},
		{"valid sandbox functions", `{{ file "a" }}{{ env "A" }}{{ mustEnv "A" }}{{ envOrDefault "A" "b" }}`, "", "", 0, 0, 0, ""},
		{"empty", "", "", "", 0, 0, 0, ""},
		{"unclosed action", "a\n{{ .Address }\n", "Template syntax error", `unexpected "}" in operand`, 2, 0, 0, ""},
		{"unclosed range", "{{ range service \"web\" }}\nx\n", "Template syntax error", "unexpected EOF", 3, 0, 0, ""},
		{"unknown function", "x\n\n  port = {{ kye \"a\" }}", "Unknown template function", `function "kye" not defined`, 3, 13, 3, `Did you mean "key"?`},
		{"unknown function in pipe", `{{ "a" | toUppr }}`, "Unknown template function", `function "toUppr" not defined`, 1, 10, 6, `Did you mean "toUpper"?`},
		{"unknown function far from any", `{{ frobnicate }}`, "Unknown template function", `function "frobnicate" not defined`, 1, 4, 10, ""},
		// An unknown function in a later line than a syntax error: the syntax error first.
		{"syntax before function", "{{ kye }}\n{{ if }}", "Template syntax error", "missing value for if", 2, 0, 0, ""},
		{"plugin", `{{ plugin "/bin/sh" "-c" "id" }}`, "Template function not available", `function "plugin" is not available in mariposa templates: it would run a program`, 1, 4, 6, ""},
		{"plugin in an untaken branch", "{{ if false }}\n  {{ \"x\" | plugin \"evil\" }}{{ end }}", "Template function not available", `function "plugin" is not available`, 2, 12, 6, ""},
		{"writeToFile", `{{ writeToFile "/tmp/x" "" "" "0644" "data" }}`, "Template function not available", `function "writeToFile" is not available`, 1, 4, 11, ""},
		{"executeTemplate", `{{ define "t" }}x{{ end }}{{ executeTemplate "t" }}`, "Template function not available", `function "executeTemplate" is not available`, 1, 30, 15, ""},
		{"vault", `{{ with secret "secret/x" }}{{ end }}`, "Template function not available", "no Vault", 1, 9, 6, ""},
		{"nomad", `{{ range nomadVar "x" }}{{ end }}`, "Template function not available", "no Nomad", 1, 10, 8, ""},
		{"first removed in text order", "{{ writeToFile }}{{ plugin }}", "Template function not available", `"writeToFile"`, 1, 4, 11, ""},
		{"undefined template", "{{ define \"a\" }}{{ end }}\n{{ template \"b\" }}", "Undefined template", `template "b" is not defined`, 2, 13, 0, `{{ define "b" }}`},
		{"unicode column", "é{{ kye }}", "Unknown template function", `function "kye" not defined`, 1, 5, 3, `"key"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTemplate(tt.text)
			if tt.summary == "" {
				if err != nil {
					t.Fatalf("error %v; want none", err)
				}
				return
			}
			var te *schema.TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("error %v (%T); want a *schema.TemplateError", err, err)
			}
			if te.Summary != tt.summary || !strings.Contains(te.Message, tt.message) ||
				te.Line != tt.line || te.Column != tt.column || !strings.Contains(te.Hint, tt.hint) {
				t.Fatalf("got %+v; want summary %q, message ~%q, %d:%d, hint ~%q", te, tt.summary, tt.message, tt.line, tt.column, tt.hint)
			}
			if tt.hint == "" && te.Hint != "" && te.Summary == "Unknown template function" {
				t.Errorf("hint %q; want none", te.Hint)
			}
			if te.Column > 0 {
				if tt.length > 0 && te.Length != tt.length {
					t.Errorf("length %d; want %d", te.Length, tt.length)
				}
				if tt.length > 0 && !strings.Contains(tt.text[te.Offset:te.Offset+te.Length], strings.Trim(strings.Fields(te.Message)[1], `"`)) {
					t.Errorf("offset %d length %d point at %q", te.Offset, te.Length, tt.text[te.Offset:te.Offset+te.Length])
				}
			}
		})
	}
}

// TestUnparsableTemplateFails: a template that cannot parse fails the
// service at once, with where, instead of waiting for data forever.
func TestUnparsableTemplateFails(t *testing.T) {
	dir := t.TempDir()
	m := startManager(t, "127.0.0.1:1") // no Consul needed
	src := filepath.Join(dir, "web.conf.tpl")
	mustWrite(t, src, "# web\nlisten = 80\nupstream = {{ kye \"web/upstream\" }}\n")
	svc := templateService(dir, "web", `ok`, `{{ .Address }`)
	svc.Templates = append(svc.Templates, &schema.Template{Source: src, Destination: filepath.Join(dir, "conf", "web.conf"), Perms: 0o644, ChangeMode: "restart"})
	// The first template is fine and renders; the service still fails.
	svc.Templates[1], svc.Templates[2] = svc.Templates[2], svc.Templates[1]
	f := follow(m.Service(svc))
	st := f.until(t, "failed", func(s ServiceState) bool { return s.Failed != "" })
	want := `failed: template conf/web.conf: web.conf.tpl:3:15: function "kye" not defined`
	if st.Failed != want {
		t.Fatalf("Failed = %q\nwant     %q", st.Failed, want)
	}
	if st.Ready() {
		t.Fatal("Ready() with a template that cannot parse")
	}
	if len(st.Errors) != 2 || !strings.Contains(st.Errors[1], `web-b.conf: contents:1: unexpected "}" in operand`) {
		t.Fatalf("errors %q", st.Errors)
	}
	// Failed stays: waiting changes nothing.
	st = f.until(t, "first template rendered", func(s ServiceState) bool { return renders(f.sd, 0) == 1 })
	if st = f.sd.State(); st.Failed != want || st.Ready() {
		t.Fatalf("later state %+v", st)
	}

	// A template with only missing data is not failed: it waits.
	svc2 := templateService(t.TempDir(), "api", `{{ key "api/conf" }}`)
	f2 := follow(m.Service(svc2))
	st2 := f2.until(t, "waiting", func(s ServiceState) bool { return strings.Contains(s.Waiting, "needs") || s.Failed != "" })
	if st2.Failed != "" {
		t.Fatalf("missing data reported as failed: %q", st2.Failed)
	}
}

// TestUnreadableTemplateFails: a source that vanished before the runner
// read it is permanent too.
func TestUnreadableTemplateFails(t *testing.T) {
	dir := t.TempDir()
	m := startManager(t, "127.0.0.1:1")
	src := filepath.Join(dir, "gone.tpl")
	mustWrite(t, src, "x")
	svc := templateService(dir, "web")
	svc.Templates = append(svc.Templates, &schema.Template{Source: src, Destination: filepath.Join(dir, "out"), Perms: 0o644, ChangeMode: "restart"})
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	st := follow(m.Service(svc)).until(t, "failed", func(s ServiceState) bool { return s.Failed != "" })
	if !strings.HasPrefix(st.Failed, "failed: template out: ") || st.Ready() {
		t.Fatalf("state %+v", st)
	}
}
