package main

import (
	"bytes"
	"os"
	"os/exec"
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
