package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mitchellh/cli"
)

func writeTestFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const validHCL = `service "web" {
  command = ["python3", "-m", "http.server"]
  port    = 8080
}
`

const invalidHCL = `service "web" {
  command = []
  port    = 70000
  restart {
    polcy = "always"
  }
}
`

// hostEnv is an environment whose PATH holds executable stubs of progs, so
// that validate's host checks find them.
func hostEnv(t *testing.T, progs ...string) []string {
	t.Helper()
	bin := t.TempDir()
	for _, p := range progs {
		if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"PATH=" + bin}
}

func TestValidateValid(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir, "a.hcl", validHCL)
	writeTestFile(t, dir, "b.hcl", `service "db" { command = ["db"] }`)
	ui := cli.NewMockUi()
	c := &ValidateCommand{UI: ui, Environ: hostEnv(t, "python3", "db")}
	if code := c.Run([]string{dir}); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, ui.ErrorWriter.String())
	}
	if got := ui.OutputWriter.String(); !strings.Contains(got, "2 services valid (2 files)") {
		t.Errorf("output = %q", got)
	}
	if ui.ErrorWriter.String() != "" {
		t.Errorf("stderr = %q", ui.ErrorWriter.String())
	}
}

func TestValidateInvalid(t *testing.T) {
	dir := t.TempDir()
	p := writeTestFile(t, dir, "web.hcl", invalidHCL)
	ui := cli.NewMockUi()
	c := &ValidateCommand{UI: ui, Environ: []string{}}
	if code := c.Run([]string{p}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	errOut := ui.ErrorWriter.String()
	for _, want := range []string{
		"Error: " + p + ":2:13: Empty command",
		"Error: " + p + ":3:13: Port out of range",
		"Error: " + p + ":5:5: Unsupported argument",
		`Did you mean "policy"?`,
		"on " + p + " line 3",  // the position ...
		"3:   port    = 70000", // ... and the source line
		"3 errors, 0 warnings.",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if ui.OutputWriter.String() != "" {
		t.Errorf("stdout = %q", ui.OutputWriter.String())
	}
}

func TestValidateJSON(t *testing.T) {
	dir := t.TempDir()
	p := writeTestFile(t, dir, "web.hcl", invalidHCL)
	ui := cli.NewMockUi()
	c := &ValidateCommand{UI: ui, Environ: []string{}}
	if code := c.Run([]string{"-json", p}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var res struct {
		Valid        bool     `json:"valid"`
		ErrorCount   int      `json:"error_count"`
		WarningCount int      `json:"warning_count"`
		Services     []string `json:"services"`
		Diagnostics  []struct {
			Severity string `json:"severity"`
			Summary  string `json:"summary"`
			Detail   string `json:"detail"`
			Range    *struct {
				Filename string `json:"filename"`
				Start    struct{ Line, Column, Byte int }
				End      struct{ Line, Column, Byte int }
			} `json:"range"`
		} `json:"diagnostics"`
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, ui.OutputWriter.String())
	}
	if res.Valid || res.ErrorCount != 3 || len(res.Diagnostics) != 3 || len(res.Services) != 0 {
		t.Fatalf("result = %+v", res)
	}
	d := res.Diagnostics[0]
	if d.Severity != "error" || d.Summary != "Empty command" || d.Range == nil ||
		d.Range.Filename != p || d.Range.Start.Line != 2 || d.Range.Start.Column != 13 || d.Range.End.Column != 15 {
		t.Errorf("first diagnostic = %+v range %+v", d, d.Range)
	}

	ui = cli.NewMockUi()
	c = &ValidateCommand{UI: ui, Environ: hostEnv(t, "python3")}
	good := writeTestFile(t, dir, "good.hcl", validHCL)
	if code := c.Run([]string{"-json", good}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.OutputWriter.String())
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Valid || res.ErrorCount != 0 || len(res.Services) != 1 || res.Services[0] != "web" || len(res.Diagnostics) != 0 {
		t.Errorf("result = %+v", res)
	}
}

func TestValidateVars(t *testing.T) {
	dir := t.TempDir()
	p := writeTestFile(t, dir, "v.hcl", `
variable "port" {}
service "web" {
  command = ["web"]
  port    = var.port
}`)
	ui := cli.NewMockUi()
	if code := (&ValidateCommand{UI: ui, Environ: []string{}}).Run([]string{p}); code != 1 ||
		!strings.Contains(ui.ErrorWriter.String(), "Missing variable value") {
		t.Fatalf("without a value: exit %d, %s", code, ui.ErrorWriter.String())
	}
	ui = cli.NewMockUi()
	if code := (&ValidateCommand{UI: ui, Environ: []string{}}).Run([]string{"-var", "port=80", p}); code != 0 {
		t.Fatalf("with -var: exit %d, %s", code, ui.ErrorWriter.String())
	}
	ui = cli.NewMockUi()
	if code := (&ValidateCommand{UI: ui, Environ: []string{"MARIPOSA_VAR_port=80"}}).Run([]string{p}); code != 0 {
		t.Fatalf("with env: exit %d, %s", code, ui.ErrorWriter.String())
	}
}

func TestValidateUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"-bogus", "x.hcl"}, {"-var", "novalue", "x.hcl"}} {
		ui := cli.NewMockUi()
		c := &ValidateCommand{UI: ui}
		if code := c.Run(args); code != 1 {
			t.Errorf("%q: exit %d, want 1", args, code)
		}
		if !strings.Contains(ui.ErrorWriter.String(), "Usage: mariposa validate [options] PATH...") {
			t.Errorf("%q: no usage in %q", args, ui.ErrorWriter.String())
		}
	}
	ui := cli.NewMockUi()
	if code := (&ValidateCommand{UI: ui}).Run([]string{"/does/not/exist.hcl"}); code != 1 {
		t.Errorf("missing file: exit %d", code)
	}
	c := &ValidateCommand{}
	if !strings.HasPrefix(c.Help(), "Usage: mariposa validate [options] PATH...") || c.Synopsis() == "" ||
		strings.Contains(c.Synopsis(), "\n") {
		t.Errorf("help/synopsis: %q %q", c.Help(), c.Synopsis())
	}
}

// TestValidateTemplates: templates are parsed at validation with the
// renderer's functions, and problems point into the template file or, for
// inline contents, into the HCL file.
func TestValidateTemplates(t *testing.T) {
	tests := []struct {
		name  string
		hcl   string
		tpl   string // written as web.conf.tpl
		code  int
		wants []string // in stderr; %s is the directory
	}{
		{"source syntax error", `service "web" {
  command = ["web"]
  template {
    source      = "web.conf.tpl"
    destination = "web.conf"
  }
}`, "listen {{ .Port }}\naddress = {{ .Address }\n", 1, []string{
			"Error: %s/web.conf.tpl:2:1: Template syntax error",
			"on %s/web.conf.tpl line 2:",
			"2: address = {{ .Address }",
			`The template web.conf.tpl does not parse: unexpected "}" in operand.`,
			"1 error, 0 warnings.",
		}},
		{"source unknown function", `service "web" {
  command = ["web"]
  template {
    source      = "web.conf.tpl"
    destination = "web.conf"
  }
}`, "# web\nlisten = 80\nupstream = {{ kye \"web/upstream\" }}\n", 1, []string{
			"Error: %s/web.conf.tpl:3:15: Unknown template function",
			`function "kye" not defined. Did you mean "key"?`,
		}},
		{"inline heredoc, forbidden function in an untaken branch", `service "web" {
  command = ["web"]
  template {
    destination = "web.conf"
    contents    = <<-EOT
      {{ if false }}
        {{ plugin "/bin/sh" "-c" "id" }}
      {{ end }}
    EOT
  }
}`, "", 1, []string{
			"Error: %s/web.hcl:7:12: Template function not available",
			`7:         {{ plugin "/bin/sh" "-c" "id" }}`,
			`function "plugin" is not available in mariposa templates: it would run a program.`,
		}},
		{"inline quoted, each forbidden function", `service "web" {
  command = ["web"]
  template {
    destination = "a"
    contents    = "{{ writeToFile }}"
  }
  template {
    destination = "b"
    contents    = "{{ define \"t\" }}{{ end }}{{ executeTemplate \"t\" }}"
  }
  template {
    destination = "c"
    contents    = "{{ with secret \"kv/x\" }}{{ end }}"
  }
  template {
    destination = "d"
    contents    = "{{ range nomadService \"x\" }}{{ end }}"
  }
}`, "", 1, []string{
			"Error: %s/web.hcl:5:23: Template function not available",
			`function "writeToFile" is not available`,
			"Error: %s/web.hcl:9:50: Template function not available",
			"The template contents does not parse: function \"executeTemplate\" is not available",
			"Error: %s/web.hcl:13:28: Template function not available",
			`function "secret" is not available in mariposa templates: mariposa templates read Consul only (no Vault).`,
			"Error: %s/web.hcl:17:29: Template function not available",
			`(no Nomad)`,
			"4 errors, 0 warnings.",
		}},
		{"valid templates", `service "web" {
  command = ["web"]
  template {
    source      = "web.conf.tpl"
    destination = "web.conf"
  }
  template {
    destination = "b"
    contents    = <<-EOT
      {{ range service "db" }}{{ .Address }}:{{ .Port }}{{ end }}
      {{ keyOrDefault "x" "y" | toUpper }} {{ sprig_upper "a" }} {{ env "HOME" }}
    EOT
  }
}`, `{{ define "x" }}{{ key "a" }}{{ end }}{{ template "x" }}`, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := writeTestFile(t, dir, "web.hcl", tt.hcl)
			if tt.tpl != "" {
				writeTestFile(t, dir, "web.conf.tpl", tt.tpl)
			}
			ui := cli.NewMockUi()
			code := (&ValidateCommand{UI: ui, Environ: hostEnv(t, "web")}).Run([]string{p})
			errOut := ui.ErrorWriter.String()
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, errOut)
			}
			for _, w := range tt.wants {
				if strings.Contains(w, "%s") {
					w = strings.ReplaceAll(w, "%s", dir)
				}
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if tt.code == 0 && errOut != "" {
				t.Errorf("stderr = %q", errOut)
			}
		})
	}
}

func TestValidateTemplateJSON(t *testing.T) {
	dir := t.TempDir()
	p := writeTestFile(t, dir, "web.hcl", `service "web" {
  command = ["web"]
  template {
    source      = "web.conf.tpl"
    destination = "web.conf"
  }
}`)
	writeTestFile(t, dir, "web.conf.tpl", "a\n  {{ kye }}\n")
	ui := cli.NewMockUi()
	if code := (&ValidateCommand{UI: ui, Environ: hostEnv(t, "web")}).Run([]string{"-json", p}); code != 1 {
		t.Fatalf("exit %d", code)
	}
	var res struct {
		Diagnostics []struct {
			Summary string
			Range   struct {
				Filename   string
				Start, End struct{ Line, Column, Byte int }
			}
		}
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Diagnostics) != 1 {
		t.Fatalf("%+v", res)
	}
	d := res.Diagnostics[0]
	if d.Summary != "Unknown template function" || d.Range.Filename != filepath.Join(dir, "web.conf.tpl") ||
		d.Range.Start.Line != 2 || d.Range.Start.Column != 6 || d.Range.Start.Byte != 7 || d.Range.End.Column != 9 || d.Range.End.Byte != 10 {
		t.Fatalf("%+v", d)
	}
}

// TestValidateWarnings: problems of this machine and change_mode with env
// are warnings: the configuration stays valid.
func TestValidateWarnings(t *testing.T) {
	dir := t.TempDir()
	p := writeTestFile(t, dir, "web.hcl", `service "web" {
  command = ["nosuch-program"]
  dir     = "missing-dir"
  template {
    contents    = "A=1"
    destination = "/tmp/x.env"
    env         = true
    change_mode = "signal"
  }
}`)
	ui := cli.NewMockUi()
	if code := (&ValidateCommand{UI: ui, Environ: hostEnv(t)}).Run([]string{p}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	errOut := ui.ErrorWriter.String()
	for _, want := range []string{
		"Warning: " + p + ":2:13: Program not found",
		"Warning: " + p + ":3:13: Directory not found",
		"Warning: " + p + ":8:5: change_mode not used",
		"change_mode is ignored with env = true; an env template restarts the process",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(ui.OutputWriter.String(), "1 service valid (1 file).") {
		t.Errorf("stdout = %q", ui.OutputWriter.String())
	}
}
