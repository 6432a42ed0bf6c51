package command

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/internal/logring"
)

func TestLogs(t *testing.T) {
	path, logs := controlServer(t, &fakeTarget{})
	r := logs.Get("web")
	for i := 1; i <= 5; i++ {
		stream := "stdout"
		if i == 4 {
			stream = "stderr"
		}
		r.Add(logring.Line{Stream: stream, Text: fmt.Sprint("line ", i)})
	}
	ui := cli.NewMockUi()
	if code := (&LogsCommand{UI: ui}).Run([]string{"-control-socket", path, "web"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	if got, want := ui.OutputWriter.String(), "line 1\nline 2\nline 3\n[stderr] line 4\nline 5\n"; got != want {
		t.Fatalf("output %q, want %q", got, want)
	}

	ui = cli.NewMockUi()
	if code := (&LogsCommand{UI: ui}).Run([]string{"-control-socket", path, "-n", "2", "-timestamps", "web"}); code != 0 {
		t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
	}
	lines := strings.Split(strings.TrimSpace(ui.OutputWriter.String()), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], " [stderr] line 4") || !strings.HasSuffix(lines[1], " line 5") {
		t.Fatalf("output %q", lines)
	}
	stamp, _, _ := strings.Cut(lines[1], " ")
	if ts, err := time.Parse(time.RFC3339Nano, stamp); err != nil || time.Since(ts) > time.Minute {
		t.Fatalf("timestamp %q: %v", stamp, err)
	}

	// A service that has written nothing prints nothing.
	ui = cli.NewMockUi()
	if code := (&LogsCommand{UI: ui}).Run([]string{"-control-socket", path, "worker"}); code != 0 || ui.OutputWriter.String() != "" {
		t.Fatalf("exit %d, output %q", code, ui.OutputWriter.String())
	}
}

func TestLogsErrors(t *testing.T) {
	path, _ := controlServer(t, &fakeTarget{})
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-control-socket", path, "nope"}, `mariposa logs: no service "nope" on this node (services: web, worker)`},
		{[]string{"-control-socket", path, "-n", "-3", "web"}, "-n must be 0 or more"},
		{[]string{"-control-socket", path, "-n", "x", "web"}, "invalid value"},
		{[]string{"-control-socket", path}, "needs exactly one SERVICE"},
		{[]string{"-control-socket", filepath.Join(filepath.Dir(path), "x.sock"), "-f", "web"}, "no mariposa is running here"},
	}
	for _, tc := range cases {
		ui := cli.NewMockUi()
		if code := (&LogsCommand{UI: ui}).Run(tc.args); code != 1 {
			t.Fatalf("%q: exit %d, want 1", tc.args, code)
		}
		if got := ui.ErrorWriter.String(); !strings.Contains(got, tc.want) {
			t.Fatalf("%q: stderr %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestLogsFollow(t *testing.T) {
	path, logs := controlServer(t, &fakeTarget{})
	r := logs.Get("web")
	r.Add(logring.Line{Stream: "stdout", Text: "old 1"})
	r.Add(logring.Line{Stream: "stdout", Text: "old 2"})
	ui := cli.NewMockUi()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- (&LogsCommand{UI: ui, Context: ctx}).Run([]string{"-control-socket", path, "web", "-f", "-n", "1"})
	}()
	waitOutput := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for ui.OutputWriter.String() != want {
			if time.Now().After(deadline) {
				t.Fatalf("output %q, want %q", ui.OutputWriter.String(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitOutput("old 2\n")
	// The backlog is printed once the server has subscribed.
	r.Add(logring.Line{Stream: "stderr", Text: "new"})
	waitOutput("old 2\n[stderr] new\n")
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, ui.ErrorWriter.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not stop")
	}
	if got := ui.ErrorWriter.String(); got != "" {
		t.Fatalf("stderr after an interrupt: %q", got)
	}
}

func TestLogsFollowEndsWhenServiceRemoved(t *testing.T) {
	path, logs := controlServer(t, &fakeTarget{})
	r := logs.Get("web")
	ui := cli.NewMockUi()
	done := make(chan int, 1)
	go func() {
		done <- (&LogsCommand{UI: ui, Context: context.Background()}).Run([]string{"-control-socket", path, "-f", "web"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for r.Followers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("never subscribed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	logs.Remove("web")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not end")
	}
	if got := ui.ErrorWriter.String(); !strings.Contains(got, "the stream ended: mariposa stopped or web was removed") {
		t.Fatalf("stderr %q", got)
	}
}
