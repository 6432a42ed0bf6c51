package schema

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"1s", time.Second, ""},
		{"500ms", 500 * time.Millisecond, ""},
		{"5m", 5 * time.Minute, ""},
		{"1h30m", 90 * time.Minute, ""},
		{" 2s ", 2 * time.Second, ""},
		{"0", 0, ""},
		{"0s", 0, ""},
		{"10", 0, `"10" has no unit; write for example "10s"`},
		{"1.5", 0, `write for example "1.5s"`},
		{"", 0, "must not be empty"},
		{"5 minutes", 0, "is not a duration"},
		{"10x", 0, "is not a duration"},
		{"-1s", 0, "is negative"},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if tt.wantErr == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseDuration(%q) error = %v; want it to contain %q", tt.in, err, tt.wantErr)
		}
	}
}

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in      string
		want    syscall.Signal
		wantErr string
	}{
		{"SIGHUP", syscall.SIGHUP, ""},
		{"HUP", syscall.SIGHUP, ""},
		{"hup", syscall.SIGHUP, ""},
		{"sigterm", syscall.SIGTERM, ""},
		{"SigUsr1", syscall.SIGUSR1, ""},
		{" INT ", syscall.SIGINT, ""},
		{"KILL", syscall.SIGKILL, ""},
		{"SIGTREM", 0, `Did you mean "SIGTERM"?`},
		{"USR3", 0, `Did you mean "SIGUSR1"?`},
		{"FOO", 0, "is not a signal"},
		{"15", 0, "by name"},
		{"SIG15", 0, "by name"},
		{"", 0, "is not a signal"},
	}
	for _, tt := range tests {
		got, err := ParseSignal(tt.in)
		if tt.wantErr == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseSignal(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseSignal(%q) error = %v; want it to contain %q", tt.in, err, tt.wantErr)
		}
	}
	if SignalName(syscall.SIGHUP) != "SIGHUP" || SignalName(syscall.Signal(99)) != "99" {
		t.Errorf("SignalName: %q %q", SignalName(syscall.SIGHUP), SignalName(syscall.Signal(99)))
	}
}

func TestParsePerms(t *testing.T) {
	tests := []struct {
		in      string
		want    os.FileMode
		wantErr string
	}{
		{"0640", 0o640, ""},
		{"640", 0o640, ""},
		{"0o600", 0o600, ""},
		{"0777", 0o777, ""},
		{"0", 0, ""},
		{"0999", 0, "not an octal mode"},
		{"rw-r--r--", 0, "not an octal mode"},
		{"", 0, "must not be empty"},
		{"1777", 0, "out of range"},
		{"-1", 0, "not an octal mode"},
	}
	for _, tt := range tests {
		got, err := ParsePerms(tt.in)
		if tt.wantErr == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParsePerms(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParsePerms(%q) error = %v; want it to contain %q", tt.in, err, tt.wantErr)
		}
	}
}

func TestSuggest(t *testing.T) {
	valid := []string{"always", "on-failure", "never"}
	tests := []struct{ in, want string }{
		{"on-falure", "on-failure"},
		{"allways", "always"},
		{"nevr", "never"},
		{"sometimes", ""},
		{"", ""},
		{"always", "always"},
	}
	for _, tt := range tests {
		if got := suggest(tt.in, valid); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := didYouMean("nevr", valid); got != ` Did you mean "never"?` {
		t.Errorf("didYouMean = %q", got)
	}
	if got := didYouMean("zzz", valid); got != "" {
		t.Errorf("didYouMean = %q", got)
	}
	if got := quotedList(valid); got != `"always", "on-failure" or "never"` {
		t.Errorf("quotedList = %q", got)
	}
}
