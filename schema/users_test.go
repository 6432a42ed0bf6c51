package schema

import (
	"errors"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// TestUserCheck: a user this mariposa cannot switch to, or that this
// machine does not know, is an error with its position when the files are
// loaded to run, a warning for validate; templates default to the
// service's owner.
func TestUserCheck(t *testing.T) {
	src := `service "db" {
  command = ["postgres"]
  user    = "postgres"
  template {
    contents    = "x"
    destination = "pg.conf"
  }
  template {
    contents    = "y"
    destination = "other.conf"
    group       = 70
  }
}

service "plain" {
  command = ["a"]
}
`
	noSwitch := func() error { return errors.New("mariposa runs as uid 1000 without CAP_SETUID and CAP_SETGID") }
	unknown := func(u, g string) error { return errors.New("unknown user " + u) }
	tests := []struct {
		name     string
		check    *UserCheck
		severity hcl.DiagnosticSeverity
		summary  string
	}{
		{"run, cannot switch", &UserCheck{CanSwitch: noSwitch, Strict: true}, hcl.DiagError, "Cannot switch users"},
		{"validate, cannot switch", &UserCheck{CanSwitch: noSwitch}, hcl.DiagWarning, "Cannot switch users"},
		{"run, unknown user", &UserCheck{CanSwitch: func() error { return nil }, Resolve: unknown, Strict: true}, hcl.DiagError, "Unknown user or group"},
		{"validate, unknown user", &UserCheck{Resolve: unknown}, hcl.DiagWarning, "Unknown user or group"},
		{"all fine", &UserCheck{CanSwitch: func() error { return nil }, Resolve: func(string, string) error { return nil }, Strict: true}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}, Users: tt.check})
			var got []*hcl.Diagnostic
			for _, d := range diags.diags {
				if d.Summary == "Cannot switch users" || d.Summary == "Unknown user or group" {
					got = append(got, d)
				}
			}
			if tt.summary == "" {
				if len(got) != 0 || cfg == nil {
					t.Fatalf("want no user diagnostics and a config, got %v", diags.Error())
				}
				db := cfg.Services[0]
				if db.User != "postgres" || db.Templates[0].User != "postgres" || db.Templates[1].User != "" || db.Templates[1].Group != "70" {
					t.Fatalf("owners: service %q, templates %+v %+v", db.User, db.Templates[0], db.Templates[1])
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("want one %q, got %d: %s", tt.summary, len(got), diags.Error())
			}
			d := got[0]
			if d.Severity != tt.severity || d.Summary != tt.summary || d.Subject == nil || d.Subject.Start.Line != 3 || d.Subject.Start.Column != 13 {
				t.Fatalf("got %v %q at %v", d.Severity, d.Summary, d.Subject)
			}
			if (cfg == nil) != (tt.severity == hcl.DiagError) {
				t.Fatalf("config returned %v with severity %v", cfg != nil, tt.severity)
			}
		})
	}
}
