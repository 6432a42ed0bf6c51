package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/internal/proc"
)

// Child output reads naturally in text logs and keeps its stream as a field
// in JSON logs.
func TestChildWriter(t *testing.T) {
	lines := []proc.Line{
		{Name: "web", Stream: "stdout", Text: "listening on :8080"},
		{Name: "web", Stream: "stderr", Text: "GET / 200"},
		{Name: "db", Stream: "stderr", Text: "key=value looking text"},
	}
	var text bytes.Buffer
	w := childWriter(hclog.New(&hclog.LoggerOptions{Name: "mariposa", Output: &text}), false)
	for _, l := range lines {
		w(l)
	}
	got := strings.Split(strings.TrimSpace(text.String()), "\n")
	want := []string{
		"[INFO]  mariposa.web: listening on :8080",
		"[INFO]  mariposa.web: stderr: GET / 200",
		"[INFO]  mariposa.db: stderr: key=value looking text",
	}
	if len(got) != len(want) {
		t.Fatalf("text log:\n%s", text.String())
	}
	for i := range want {
		if !strings.HasSuffix(got[i], want[i]) {
			t.Errorf("line %d = %q, want it to end with %q", i, got[i], want[i])
		}
		if strings.Contains(got[i], "stream=") {
			t.Errorf("line %d has a stream= field glued to the text: %q", i, got[i])
		}
	}

	var js bytes.Buffer
	w = childWriter(hclog.New(&hclog.LoggerOptions{Name: "mariposa", Output: &js, JSONFormat: true}), true)
	for _, l := range lines {
		w(l)
	}
	dec := json.NewDecoder(&js)
	for i, l := range lines {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("json line %d: %v", i, err)
		}
		if m["@message"] != l.Text || m["stream"] != l.Stream || m["@module"] != "mariposa."+l.Name {
			t.Errorf("json line %d = %v, want message %q stream %q", i, m, l.Text, l.Stream)
		}
	}
}

// Elsewhere than Linux, run says so and does nothing else.
func TestRunNeedsLinux(t *testing.T) {
	defer func(f func() error) { runSupported = f }(runSupported)
	runSupported = func() error { return errors.New("no parent-death signal") }
	dir := t.TempDir()
	p := writeTestFile(t, dir, "a.hcl", validHCL)
	ui := cli.NewMockUi()
	if code := (&RunCommand{UI: ui}).Run([]string{"-consul-addr", "127.0.0.1:1", p}); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if got := ui.ErrorWriter.String(); !strings.HasPrefix(got, "mariposa run needs Linux: no parent-death signal") {
		t.Errorf("stderr = %q", got)
	}
}

// Bad flags: a clear error, exit 1, before anything starts.
func TestRunFlagErrors(t *testing.T) {
	for _, k := range consulEnv {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	p := writeTestFile(t, dir, "a.hcl", validHCL)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-token", "a", "-token-file", "/x", p}, "mariposa run: give -token or -token-file, not both"},
		{[]string{"-client-cert", "/c.pem", p}, "mariposa run: -client-cert and -client-key go together"},
		{[]string{"-log-level", "loud", p}, `unknown -log-level "loud"`},
		{[]string{"-nope", p}, "flag provided but not defined: -nope"},
		{[]string{"-dev"}, "mariposa run: no service files given"},
		{[]string{"-reserve", "memory=512", p}, "mariposa run: -reserve goes with -cluster"},
		{[]string{"-cluster", "-reserve", "disk=5", p}, `-reserve: "disk=5": unknown resource "disk"`},
		{[]string{"-cluster", "-reserve", "memory=999999999", p}, "mariposa run: -reserve 999999999 MiB memory is more than this host has"},
	} {
		ui := cli.NewMockUi()
		if code := (&RunCommand{UI: ui}).Run(tc.args); code != 1 {
			t.Errorf("%v: exit %d", tc.args, code)
		}
		if got := ui.ErrorWriter.String(); !strings.Contains(got, tc.want) {
			t.Errorf("%v: stderr = %q, want %q", tc.args, got, tc.want)
		}
	}
}
