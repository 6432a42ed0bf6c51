package command

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/internal/logring"
)

// fakeTarget stands in for the supervisor behind the control socket.
type fakeTarget struct {
	mu     sync.Mutex
	calls  []string
	actors []string
	err    error
}

func (f *fakeTarget) Restart(s, by string) error     { return f.record("restart "+s, by) }
func (f *fakeTarget) ResetFailed(s, by string) error { return f.record("reset "+s, by) }
func (f *fakeTarget) Services() []string             { return []string{"web", "worker"} }

func (f *fakeTarget) record(c, by string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	f.actors = append(f.actors, by)
	return f.err
}

// Actors is who asked for each call.
func (f *fakeTarget) Actors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actors...)
}

func (f *fakeTarget) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// controlServer serves a fake target on a socket in a short temporary
// directory (t.TempDir() paths can outgrow sun_path).
func controlServer(t *testing.T, target *fakeTarget) (string, *logring.Set) {
	t.Helper()
	d, err := os.MkdirTemp("", "mpcmd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	path := filepath.Join(d, "m.sock")
	logs := logring.NewSet(100, 1<<20)
	srv, err := control.Listen(path, target, logs, nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	return path, logs
}

func TestRestart(t *testing.T) {
	target := &fakeTarget{}
	path, _ := controlServer(t, target)
	ui := cli.NewMockUi()
	if code := (&RestartCommand{UI: ui}).Run([]string{"-control-socket", path, "web"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if got := target.Calls(); !slices.Equal(got, []string{"restart web"}) {
		t.Fatalf("calls %q", got)
	}
	if got := ui.OutputWriter.String(); got != "web: restarting\n" {
		t.Fatalf("output %q", got)
	}

	// The environment names the socket when the flag does not.
	t.Setenv(control.EnvSocket, path)
	ui = cli.NewMockUi()
	if code := (&RestartCommand{UI: ui}).Run([]string{"worker"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if got := target.Calls(); len(got) != 2 || got[1] != "restart worker" {
		t.Fatalf("calls %q", got)
	}
}

func TestRestartErrors(t *testing.T) {
	target := &fakeTarget{}
	path, _ := controlServer(t, target)
	missing := filepath.Join(filepath.Dir(path), "none.sock")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no service", []string{"-control-socket", path}, "needs exactly one SERVICE"},
		{"two services", []string{"-control-socket", path, "web", "worker"}, "needs exactly one SERVICE"},
		{"bad flag", []string{"-bogus", "web"}, "flag provided but not defined: -bogus"},
		{"unknown service", []string{"-control-socket", path, "nope"},
			`mariposa restart: no service "nope" on this node (services: web, worker)`},
		{"no mariposa", []string{"-control-socket", missing, "web"},
			"mariposa restart: no mariposa is running here (no control socket at " + missing +
				"); is `mariposa run` running as another user?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ui := cli.NewMockUi()
			if code := (&RestartCommand{UI: ui}).Run(tc.args); code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			if got := ui.ErrorWriter.String(); !strings.Contains(got, tc.want) {
				t.Fatalf("stderr %q, want %q", got, tc.want)
			}
			if ui.OutputWriter.String() != "" {
				t.Fatalf("stdout %q", ui.OutputWriter.String())
			}
		})
	}
	if got := target.Calls(); len(got) != 0 {
		t.Fatalf("bad input reached the target: %q", got)
	}

	// The target's refusal is shown as it is.
	target.mu.Lock()
	target.err = errors.New(`web is waiting: db needs 1 passing mysql, has 0`)
	target.mu.Unlock()
	ui := cli.NewMockUi()
	if code := (&RestartCommand{UI: ui}).Run([]string{"-control-socket", path, "web"}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if got := ui.ErrorWriter.String(); got != "mariposa restart: web is waiting: db needs 1 passing mysql, has 0\n" {
		t.Fatalf("stderr %q", got)
	}
}
