package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/command"
)

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
