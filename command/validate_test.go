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

func TestValidateValid(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir, "a.hcl", validHCL)
	writeTestFile(t, dir, "b.hcl", `service "db" { command = ["db"] }`)
	ui := cli.NewMockUi()
	c := &ValidateCommand{UI: ui, Environ: []string{}}
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
	c = &ValidateCommand{UI: ui, Environ: []string{}}
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
