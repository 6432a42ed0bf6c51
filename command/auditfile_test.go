package command

import (
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/supervisor"
)

func parseAudit(t *testing.T, args ...string) *auditFlags {
	t.Helper()
	var a auditFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &a
}

// The audit file sits beside the control socket unless -audit-file says
// otherwise; -audit-file= turns it off.
func TestAuditFilePath(t *testing.T) {
	t.Setenv(control.EnvSocket, "")
	if got, want := parseAudit(t).path("/run/x/m.sock"), "/run/x/audit.jsonl"; got != want {
		t.Errorf("beside -control-socket: %q, want %q", got, want)
	}
	if got, want := parseAudit(t).path(""), filepath.Join(filepath.Dir(control.DefaultPath()), "audit.jsonl"); got != want {
		t.Errorf("default: %q, want %q", got, want)
	}
	t.Setenv(control.EnvSocket, "/tmp/mctl/s")
	if got := parseAudit(t).path(""); got != "/tmp/mctl/audit.jsonl" {
		t.Errorf("beside $%s: %q", control.EnvSocket, got)
	}
	if got := parseAudit(t, "-audit-file", "/var/log/m.jsonl").path(""); got != "/var/log/m.jsonl" {
		t.Errorf("-audit-file: %q", got)
	}
	a := parseAudit(t, "-audit-file=")
	if got := a.path(""); got != "" {
		t.Errorf("-audit-file=: %q", got)
	}
	// Off: the consumer and the close do nothing.
	ev, closeFn, err := a.open("", nil)
	if err != nil {
		t.Fatal(err)
	}
	ev(supervisorEvent())
	closeFn()

	if a := parseAudit(t); a.retention != cluster.DefaultAuditRetention || a.check() != nil {
		t.Errorf("default retention %s", a.retention)
	}
	if a := parseAudit(t, "-audit-retention", "0"); a.retention != 0 || a.check() != nil {
		t.Errorf("retention 0: %s %v", a.retention, a.check())
	}
}

func TestRunAuditFlagErrors(t *testing.T) {
	p := writeTestFile(t, t.TempDir(), "a.hcl", validHCL)
	ui := cli.NewMockUi()
	if code := (&RunCommand{UI: ui}).Run([]string{"-audit-retention", "-1h", p}); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if got, want := ui.ErrorWriter.String(), "mariposa run: -audit-retention must be 0 (keep) or more, got -1h0m0s"; !strings.Contains(got, want) {
		t.Errorf("stderr %q, want %q", got, want)
	}
	// The help documents the flags.
	for _, f := range []string{"-audit-file=PATH", "-audit-retention=168h"} {
		if !strings.Contains((&RunCommand{}).Help(), f) {
			t.Errorf("run's help lacks %s", f)
		}
	}
	if cluster.DefaultAuditRetention != 168*time.Hour {
		t.Error("the help's default retention is not the default")
	}
}

func supervisorEvent() supervisor.Event {
	return supervisor.Event{Time: time.Now(), Service: "web", ServiceID: "web-n1", Kind: supervisor.EventStarted}
}
