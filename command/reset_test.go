package command

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mitchellh/cli"
)

func TestReset(t *testing.T) {
	target := &fakeTarget{}
	path, _ := controlServer(t, target)
	ui := cli.NewMockUi()
	// Flags may follow the service.
	if code := (&ResetCommand{UI: ui}).Run([]string{"worker", "-control-socket", path}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if got := target.Calls(); !slices.Equal(got, []string{"reset worker"}) {
		t.Fatalf("calls %q", got)
	}
	if got := ui.OutputWriter.String(); got != "worker: restart history cleared; starting\n" {
		t.Fatalf("output %q", got)
	}
}

func TestResetErrors(t *testing.T) {
	target := &fakeTarget{err: errors.New("worker is not failed")}
	path, _ := controlServer(t, target)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-control-socket", path, "worker"}, "mariposa reset: worker is not failed\n"},
		{[]string{"-control-socket", path, "db"}, "mariposa reset: no service \"db\" on this node (services: web, worker)\n"},
		{[]string{"-control-socket", filepath.Join(filepath.Dir(path), "x.sock"), "db"}, "no mariposa is running here"},
		{[]string{"-control-socket", path}, "needs exactly one SERVICE"},
	}
	for _, tc := range cases {
		ui := cli.NewMockUi()
		if code := (&ResetCommand{UI: ui}).Run(tc.args); code != 1 {
			t.Fatalf("%q: exit %d, want 1", tc.args, code)
		}
		if got := ui.ErrorWriter.String(); !strings.Contains(got, tc.want) {
			t.Fatalf("%q: stderr %q, want %q", tc.args, got, tc.want)
		}
	}
	if got := target.Calls(); !slices.Equal(got, []string{"reset worker"}) {
		t.Fatalf("calls %q", got)
	}
}
