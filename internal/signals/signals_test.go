package signals

import (
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "term": syscall.SIGTERM, "HUP": syscall.SIGHUP, " sigusr1 ": syscall.SIGUSR1} {
		if got, ok := Parse(in); !ok || got != want {
			t.Errorf("Parse(%q) = %v, %v", in, got, ok)
		}
	}
	if _, ok := Parse("SIGNOPE"); ok {
		t.Error("SIGNOPE parsed")
	}
	if Name(syscall.SIGKILL) != "SIGKILL" {
		t.Error(Name(syscall.SIGKILL))
	}
}
