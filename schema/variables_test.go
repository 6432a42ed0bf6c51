package schema

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// loadSrc writes content as main.hcl in dir and loads it.
func loadSrc(t *testing.T, dir, content string, opts LoadOptions) (*Config, *Diagnostics) {
	t.Helper()
	p := write(t, dir, "main.hcl", content)
	return Load([]string{p}, opts)
}

// summaries lists the error summaries of diags, for compact assertions.
func summaries(d *Diagnostics) []string {
	var out []string
	for _, x := range d.All() {
		if x.Severity == "error" {
			out = append(out, x.Summary)
		}
	}
	return out
}

func TestVariablePrecedence(t *testing.T) {
	const src = `
variable "port" {
  default = 8080
}
service "web" {
  command = ["web"]
  port    = var.port
  tags    = ["p${var.port}"]
}
`
	tests := []struct {
		name    string
		vars    map[string]string
		environ []string
		want    int
	}{
		{"default", nil, nil, 8080},
		{"env over default", nil, []string{"MARIPOSA_VAR_port=9000"}, 9000},
		{"-var over env", map[string]string{"port": "9090"}, []string{"MARIPOSA_VAR_port=9000"}, 9090},
		{"-var over default", map[string]string{"port": "7070"}, nil, 7070},
		{"env name is case-sensitive", nil, []string{"MARIPOSA_VAR_PORT=9000"}, 8080},
		{"last env entry wins", nil, []string{"MARIPOSA_VAR_port=1", "MARIPOSA_VAR_port=2"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			environ := tt.environ
			if environ == nil {
				environ = []string{}
			}
			cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Vars: tt.vars, Environ: environ})
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			if got := cfg.Service("web").Port; got != tt.want {
				t.Errorf("port = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestVariableEnvironDefaultsToOS(t *testing.T) {
	t.Setenv("MARIPOSA_VAR_port", "6060")
	cfg, diags := loadSrc(t, t.TempDir(), `
variable "port" {}
service "web" {
  command = ["web"]
  port    = var.port
}`, LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if cfg.Service("web").Port != 6060 {
		t.Errorf("port = %d", cfg.Service("web").Port)
	}
}

func TestVariableValues(t *testing.T) {
	tests := []struct {
		name    string
		decl    string
		use     string // expression for the tags attribute
		vars    map[string]string
		environ []string
		want    []string
		errs    []string
		detail  string
	}{
		{name: "string from -var", decl: `variable "x" {}`, use: `[var.x]`,
			vars: map[string]string{"x": "hello"}, want: []string{"hello"}},
		{name: "empty env value counts as set", decl: `variable "x" { default = "d" }`, use: `["<${var.x}>"]`,
			environ: []string{"MARIPOSA_VAR_x="}, want: []string{"<>"}},
		{name: "typed number", decl: `variable "x" { type = number }`, use: `[tostring(var.x + 1)]`,
			vars: map[string]string{"x": "41"}, want: []string{"42"}},
		{name: "typed number rejects text", decl: `variable "x" { type = number }`, use: `[]`,
			vars: map[string]string{"x": "forty"}, errs: []string{"Invalid variable value"}, detail: "a number is required"},
		{name: "typed bool", decl: `variable "x" { type = bool }`, use: `[var.x ? "on" : "off"]`,
			environ: []string{"MARIPOSA_VAR_x=true"}, want: []string{"on"}},
		{name: "typed list from HCL syntax", decl: `variable "x" { type = list(string) }`, use: `var.x`,
			vars: map[string]string{"x": `["a", "b"]`}, want: []string{"a", "b"}},
		{name: "typed list rejects garbage", decl: `variable "x" { type = list(string) }`, use: `var.x`,
			vars: map[string]string{"x": `[a`}, errs: []string{"Invalid variable value"}},
		{name: "typed list too deep", decl: `variable "x" { type = list(any) }`, use: `[]`,
			vars: map[string]string{"x": strings.Repeat("[", 200000)}, errs: []string{"Invalid variable value"}, detail: "nest more than"},
		{name: "typed map default", decl: `variable "x" {
  type    = map(string)
  default = { a = "1" }
}`, use: `keys(var.x)`, want: []string{"a"}},
		{name: "missing value", decl: `variable "x" {}`, use: `[]`,
			errs: []string{"Missing variable value"}, detail: "-var x=VALUE or the MARIPOSA_VAR_x environment variable"},
		{name: "undeclared -var", decl: `variable "port" { default = 1 }`, use: `[]`,
			vars: map[string]string{"prot": "1"}, errs: []string{"Undeclared variable"}, detail: `Did you mean "port"?`},
		{name: "undeclared reference", decl: `variable "port" { default = 1 }`, use: `[var.prot]`,
			errs: []string{"Undeclared variable"}, detail: `Did you mean "port"?`},
		{name: "default from env()", decl: `variable "x" { default = env("HOME_DIR") }`, use: `[var.x]`,
			environ: []string{"HOME_DIR=/h"}, want: []string{"/h"}},
		{name: "description is accepted", decl: `variable "x" {
  description = "The x."
  default     = "y"
}`, use: `[var.x]`, want: []string{"y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			environ := tt.environ
			if environ == nil {
				environ = []string{}
			}
			src := tt.decl + "\nservice \"s\" {\n  command = [\"s\"]\n  tags = " + tt.use + "\n}\n"
			cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Vars: tt.vars, Environ: environ})
			if got := summaries(diags); !reflect.DeepEqual(got, tt.errs) {
				t.Fatalf("errors = %q, want %q\n%s", got, tt.errs, diags.Error())
			}
			if tt.detail != "" && !strings.Contains(diags.Error(), tt.detail) {
				t.Errorf("diagnostics do not mention %q:\n%s", tt.detail, diags.Error())
			}
			if tt.errs != nil {
				if cfg != nil {
					t.Errorf("config returned despite errors")
				}
				return
			}
			if got := cfg.Service("s").Tags; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("tags = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEnvFunction(t *testing.T) {
	cfg, diags := loadSrc(t, t.TempDir(), `
service "s" {
  command = ["s"]
  tags    = [env("SET"), "<${env("UNSET")}>", env("EMPTY")]
}`, LoadOptions{Environ: []string{"SET=yes", "EMPTY=", "OTHER=x"}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if got, want := cfg.Service("s").Tags, []string{"yes", "<>", ""}; !reflect.DeepEqual(got, want) {
		t.Errorf("tags = %q, want %q", got, want)
	}
}

func TestFileFunction(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conf")
	write(t, root, "secret.txt", "outside")
	write(t, dir, "motd.txt", "hello")
	write(t, dir, "sub/inner.txt", "inner")
	write(t, dir, "latin1.txt", "\xff\xfe")
	if err := os.Symlink(filepath.Join(root, "secret.txt"), filepath.Join(dir, "link-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("motd.txt", filepath.Join(dir, "link-in")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(dir, "rootlink")); err != nil {
		t.Fatal(err)
	}
	// The configuration directory itself reached through a symlink is fine.
	if err := os.Symlink(dir, filepath.Join(root, "conf-link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		arg     string
		want    string
		wantErr string
	}{
		{"motd.txt", "hello", ""},
		{"./motd.txt", "hello", ""},
		{"sub/inner.txt", "inner", ""},
		{"sub/../motd.txt", "hello", ""},
		{"link-in", "hello", ""},
		{"../secret.txt", "", "is outside"},
		{"sub/../../secret.txt", "", "is outside"},
		{filepath.Join(root, "secret.txt"), "", "is absolute"},
		{"/etc/passwd", "", "is absolute"},
		{"link-out", "", "resolves through a symlink"},
		{"rootlink/secret.txt", "", "resolves through a symlink"},
		{"missing.txt", "", `no file "missing.txt"`},
		{"sub", "", "not a regular file"},
		{".", "", "not a regular file"},
		{"", "", "the path is empty"},
		{"latin1.txt", "", "not valid UTF-8"},
	}
	for _, base := range []string{dir, filepath.Join(root, "conf-link")} {
		for _, tt := range tests {
			src := "service \"s\" {\n  command = [\"s\"]\n  version = file(" + quote(tt.arg) + ")\n}\n"
			p := filepath.Join(base, "main.hcl")
			if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, diags := Load([]string{p}, LoadOptions{Environ: []string{}})
			if tt.wantErr == "" {
				if diags.HasErrors() {
					t.Errorf("file(%q) from %s: %s", tt.arg, base, diags.Error())
				} else if got := cfg.Service("s").Version; got != tt.want {
					t.Errorf("file(%q) = %q, want %q", tt.arg, got, tt.want)
				}
				continue
			}
			if !diags.HasErrors() || !strings.Contains(diags.Error(), tt.wantErr) {
				t.Errorf("file(%q) from %s: got %q, want an error containing %q", tt.arg, base, diags.Error(), tt.wantErr)
			}
		}
	}
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "${", "$${").Replace(s) + `"`
}
