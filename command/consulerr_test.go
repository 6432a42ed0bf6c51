package command

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/mitchellh/cli"
)

// A Consul that does not answer is named with its address and where the
// address came from, by every command that talks to Consul.
func TestConsulErrText(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now

	if got := consulErrText(errors.New("Unexpected response code: 403 (Permission denied)")); got != "Unexpected response code: 403 (Permission denied)" {
		t.Errorf("another error: %q", got)
	}
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"-consul-addr", "", []string{"-consul-addr", dead},
			"cannot reach Consul's HTTP API at " + dead + " (from -consul-addr; CONSUL_HTTP_ADDR is not set): connect: connection refused"},
		{"CONSUL_HTTP_ADDR", dead, nil,
			"cannot reach Consul's HTTP API at " + dead + " (CONSUL_HTTP_ADDR=" + dead + "; -consul-addr gives another): connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CONSUL_HTTP_ADDR", tc.env)
			if tc.env == "" {
				os.Unsetenv("CONSUL_HTTP_ADDR")
			}
			for name, cmd := range map[string]func(ui cli.Ui) cli.Command{
				"status": func(ui cli.Ui) cli.Command { return &StatusCommand{UI: ui} },
				"events": func(ui cli.Ui) cli.Command { return &EventsCommand{UI: ui} },
				"pause":  func(ui cli.Ui) cli.Command { return &PauseCommand{UI: ui} },
				"resume": func(ui cli.Ui) cli.Command { return &ResumeCommand{UI: ui} },
				"queue":  func(ui cli.Ui) cli.Command { return &QueueCommand{UI: ui} },
				"drain":  func(ui cli.Ui) cli.Command { return &DrainCommand{UI: ui} },
				"why":    func(ui cli.Ui) cli.Command { return &WhyCommand{UI: ui} },
			} {
				ui := cli.NewMockUi()
				args := append([]string{}, tc.args...)
				switch name {
				case "pause":
					args = append(args, "-reason", "x")
				case "drain", "why":
					args = append(args, "n1")
				}
				code := cmd(ui).Run(args)
				got := strings.TrimSpace(ui.ErrorWriter.String())
				if code == 0 || !strings.Contains(got, tc.want) || strings.Contains(got, "dial tcp") {
					t.Errorf("%s: exit %d %q\nwant %q", name, code, got, fmt.Sprint(tc.want))
				}
			}
		})
	}
}
