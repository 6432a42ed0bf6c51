package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mitchellh/cli"
)

const uglyHCL = `service "web" {
command = ["python3"]
    port=8080
  tags = [ "a","b" ]
  check "http" {
  http = "http://127.0.0.1:8080/"
      interval="2s"
  }
}
`

const prettyHCL = `service "web" {
  command = ["python3"]
  port    = 8080
  tags    = ["a", "b"]
  check "http" {
    http     = "http://127.0.0.1:8080/"
    interval = "2s"
  }
}
`

func TestFmtRewritesInPlace(t *testing.T) {
	dir := t.TempDir()
	p := writeTestFile(t, dir, "web.hcl", uglyHCL)
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	ui := cli.NewMockUi()
	if code := (&FmtCommand{UI: ui}).Run([]string{dir}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if got := ui.OutputWriter.String(); got != p+"\n" {
		t.Errorf("listed %q, want %q", got, p)
	}
	got, _ := os.ReadFile(p)
	if string(got) != prettyHCL {
		t.Errorf("formatted:\n%s\nwant:\n%s", got, prettyHCL)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600 kept", fi.Mode())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// Idempotent: a second run changes and lists nothing.
	ui = cli.NewMockUi()
	if code := (&FmtCommand{UI: ui}).Run([]string{p}); code != 0 || ui.OutputWriter.String() != "" {
		t.Errorf("second run: exit %d, output %q", code, ui.OutputWriter.String())
	}
}

func TestFmtCheck(t *testing.T) {
	dir := t.TempDir()
	ugly := writeTestFile(t, dir, "ugly.hcl", uglyHCL)
	pretty := writeTestFile(t, dir, "pretty.hcl", prettyHCL)
	ui := cli.NewMockUi()
	if code := (&FmtCommand{UI: ui}).Run([]string{"-check", dir}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if got := ui.OutputWriter.String(); got != ugly+"\n" {
		t.Errorf("listed %q, want only %q", got, ugly)
	}
	if got, _ := os.ReadFile(ugly); string(got) != uglyHCL {
		t.Errorf("-check changed the file")
	}
	ui = cli.NewMockUi()
	if code := (&FmtCommand{UI: ui}).Run([]string{"-check", pretty}); code != 0 || ui.OutputWriter.String() != "" {
		t.Errorf("formatted file: exit %d, output %q", code, ui.OutputWriter.String())
	}
}

func TestFmtDiff(t *testing.T) {
	dir := t.TempDir()
	p := writeTestFile(t, dir, "web.hcl", uglyHCL)
	ui := cli.NewMockUi()
	if code := (&FmtCommand{UI: ui}).Run([]string{"-check", "-diff", p}); code != 1 {
		t.Fatalf("exit %d", code)
	}
	out := ui.OutputWriter.String()
	for _, want := range []string{
		"--- " + p, "+++ " + p + " (formatted)", "@@ -1,9 +1,9 @@",
		"-    port=8080", "+  port    = 8080", ` service "web" {`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
}

func TestFmtSyntaxError(t *testing.T) {
	dir := t.TempDir()
	const broken = "service \"web\" {\n  command = [\"x\"\n    port=1\n}\n"
	p := writeTestFile(t, dir, "bad.hcl", broken)
	ui := cli.NewMockUi()
	if code := (&FmtCommand{UI: ui}).Run([]string{p}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if got, _ := os.ReadFile(p); string(got) != broken {
		t.Errorf("file with syntax errors was changed")
	}
	errOut := ui.ErrorWriter.String()
	if !strings.Contains(errOut, "Error: ") || !strings.Contains(errOut, "on "+p+" line 3") {
		t.Errorf("stderr:\n%s", errOut)
	}
}

func TestFmtStdin(t *testing.T) {
	ui := cli.NewMockUi()
	c := &FmtCommand{UI: ui, Stdin: strings.NewReader(uglyHCL)}
	if code := c.Run([]string{"-"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if got := ui.OutputWriter.String(); got != prettyHCL {
		t.Errorf("stdout:\n%s", got)
	}
	ui = cli.NewMockUi()
	c = &FmtCommand{UI: ui, Stdin: strings.NewReader(uglyHCL)}
	if code := c.Run([]string{"-check", "-"}); code != 1 {
		t.Errorf("-check on stdin: exit %d", code)
	}
}

func TestFmtSymlinkAndBOM(t *testing.T) {
	dir := t.TempDir()
	real := writeTestFile(t, dir, "real.hcl", "\xEF\xBB\xBF"+uglyHCL)
	link := filepath.Join(dir, "link.hcl")
	if err := os.Symlink("real.hcl", link); err != nil {
		t.Fatal(err)
	}
	ui := cli.NewMockUi()
	if code := (&FmtCommand{UI: ui}).Run([]string{link}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlink replaced by a file")
	}
	if got, _ := os.ReadFile(real); string(got) != prettyHCL {
		t.Errorf("target:\n%q", got)
	}
}

func TestFmtUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"-nope"}} {
		ui := cli.NewMockUi()
		if code := (&FmtCommand{UI: ui}).Run(args); code != 1 ||
			!strings.Contains(ui.ErrorWriter.String(), "Usage: mariposa fmt [options] PATH...") {
			t.Errorf("%q: exit %d, %q", args, code, ui.ErrorWriter.String())
		}
	}
	ui := cli.NewMockUi()
	if code := (&FmtCommand{UI: ui}).Run([]string{"/does/not/exist.hcl"}); code != 1 {
		t.Errorf("missing file: exit %d", code)
	}
}
