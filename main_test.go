package main

import (
	"bytes"
	"strings"
	"testing"
)

// What a newcomer types first: the exit status, and what lands on stdout and
// stderr.
func TestRealMain(t *testing.T) {
	cmdList := []string{"Available commands are:", "run ", "status ", "validate ", "version ",
		"    deploy promote  Promotes", "    deploy health ", "    queue drop ", "    drain "}
	cases := []struct {
		name     string
		args     []string
		code     int
		stdout   []string // each must appear
		stderr   []string
		noStdout bool
		notInOut []string
	}{
		{name: "no args: the command list, as a usage error", args: nil, code: 1,
			stderr: append([]string{"Usage: mariposa"}, cmdList...), noStdout: true},
		{name: "unknown command", args: []string{"bogus"}, code: 1,
			stderr: append([]string{`mariposa: unknown command "bogus"`}, cmdList...), noStdout: true},
		{name: "a typo gets a suggestion", args: []string{"stauts"}, code: 1,
			stderr: []string{`mariposa: unknown command "stauts" (did you mean "status"?)`}, noStdout: true},
		{name: "unknown command with args", args: []string{"bogus", "-x", "y"}, code: 1,
			stderr: []string{`mariposa: unknown command "bogus"`}, noStdout: true},
		{name: "a flag and no command", args: []string{"-dev"}, code: 1,
			stderr: []string{"mariposa: no command given"}, noStdout: true},
		{name: "help", args: []string{"help"}, code: 0, stdout: cmdList},
		{name: "-h", args: []string{"-h"}, code: 0, stdout: cmdList},
		{name: "help run: run's own help", args: []string{"help", "run"}, code: 0,
			stdout: []string{"Usage: mariposa run [options] PATH...", "SIGHUP"}, notInOut: []string{"Available commands are:"}},
		{name: "help status", args: []string{"help", "status"}, code: 0,
			stdout: []string{"Usage: mariposa status", "-tls-server-name"}},
		{name: "help of a nested command", args: []string{"help", "deploy", "promote"}, code: 0,
			stdout: []string{"Usage: mariposa deploy promote"}, notInOut: []string{"Available commands are:"}},
		{name: "help of an unknown command", args: []string{"help", "bogus"}, code: 1,
			stderr: []string{`mariposa: unknown command "bogus"`}, noStdout: true},
		{name: "run -h says what SIGHUP does", args: []string{"run", "-h"}, code: 0,
			stdout: []string{"SIGHUP", "Reload the files", "nothing\n                      changes"}},
		{name: "version", args: []string{"version"}, code: 0, stdout: []string{"mariposa v"}},
		{name: "--version", args: []string{"--version"}, code: 0, stdout: []string{"mariposa v"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := realMain(tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q", w)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q", w)
				}
			}
			for _, w := range tc.notInOut {
				if strings.Contains(out.String(), w) {
					t.Errorf("stdout has %q", w)
				}
			}
			if tc.noStdout && out.Len() > 0 {
				t.Errorf("stdout not empty")
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			}
		})
	}
}
