package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/command"
	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// The man page has every command, with its help's Usage lines, and groff
// reads it without a warning.
func TestManPage(t *testing.T) {
	cmds := command.Commands(cli.NewMockUi())
	var b bytes.Buffer
	if err := write(&b, cmds); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for name, f := range cmds {
		c, _ := f()
		if !strings.Contains(page, `.SS "mariposa `+esc(name)+`"`) {
			t.Errorf("no section for %q", name)
		}
		for _, line := range strings.Split(c.Help(), "\n") {
			if strings.Contains(line, "Usage:") && !strings.Contains(page, escLine(line)+"\n") {
				t.Errorf("%s: the page lacks its usage line %q", name, line)
			}
		}
	}

	groff, err := exec.LookPath("groff")
	consultest.Require(t, err == nil, "groff not installed (Debian: groff-base)")
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("groff -ww: %v\n%s", err, out)
	}
	// What man shows: the flags keep their plain hyphens.
	cmd = exec.Command(groff, "-man", "-Tutf8")
	cmd.Stdin = strings.NewReader(page)
	cmd.Env = append(os.Environ(), "GROFF_NO_SGR=1")
	out, err = cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "-consul-addr") {
		t.Errorf("the rendered page lacks a plain -consul-addr:\n%.2000s", out)
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		`-dev`:                    `\-dev`,
		`.hidden`:                 `\&.hidden`,
		`'quoted`:                 `\&'quoted`,
		`C:\path`:                 `C:\epath`,
		`  plain text, no change`: `  plain text, no change`,
	} {
		if got := escLine(in); got != want {
			t.Errorf("escLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// The man page's EXIT STATUS names every command that exits 2, as its code
// says (a `return 2` in the command's files: deploy_wait.go is deploy's),
// and no other; each such command's help says when, too.
func TestExitStatus(t *testing.T) {
	files, err := filepath.Glob("../../command/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("command's files: %v", err)
	}
	ret := regexp.MustCompile(`(?m)^\s*return ([2-9])\s*$`)
	var code []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ret.FindAllStringSubmatch(string(b), -1) {
			if m[1] != "2" {
				t.Errorf("%s returns %s: the man page knows 0, 1 and 2", f, m[1])
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".go"), "_")
			if !slices.Contains(code, name) {
				code = append(code, name)
			}
		}
	}
	var page []string
	for _, c := range exitTwo {
		page = append(page, c.cmd)
	}
	slices.Sort(code)
	slices.Sort(page)
	if !slices.Equal(code, page) {
		t.Errorf("commands that return 2: %v; the man page's EXIT STATUS names %v", code, page)
	}
	cmds := command.Commands(cli.NewMockUi())
	for _, c := range exitTwo {
		f, ok := cmds[c.cmd]
		if !ok {
			t.Errorf("EXIT STATUS names %q, which is no command", c.cmd)
			continue
		}
		cmd, _ := f()
		if help := strings.Join(strings.Fields(cmd.Help()), " "); !strings.Contains(help, " 2 ") {
			t.Errorf("%s's help does not say when it exits 2", c.cmd)
		}
	}
	var b bytes.Buffer
	if err := write(&b, command.Commands(cli.NewMockUi())); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ".SH EXIT STATUS\n") {
		t.Error("the page has no EXIT STATUS section")
	}
}

// The man page has a section for every command, nested ones too (issue
// 25: mariposa help left deploy promote, deploy health and queue drop
// out).
func TestManPageCommands(t *testing.T) {
	var b bytes.Buffer
	cmds := command.Commands(cli.NewMockUi())
	if err := write(&b, cmds); err != nil {
		t.Fatal(err)
	}
	for name := range cmds {
		if !strings.Contains(b.String(), `.SS "mariposa `+name+`"`) {
			t.Errorf("the man page has no section for %q", name)
		}
	}
	for _, name := range []string{"deploy promote", "deploy health", "queue drop"} {
		if _, ok := cmds[name]; !ok {
			t.Errorf("no command %q", name)
		}
	}
}
