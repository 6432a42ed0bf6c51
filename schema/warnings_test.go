package schema

import (
	"reflect"
	"strings"
	"testing"
)

func TestWarnings(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // warning summaries, in order
	}{
		{"on_unhealthy without checks", `service "a" {
  command = ["a"]
  restart { on_unhealthy = true }
}`, []string{"No checks to act on"}},
		{"template signal without signal mode", `service "a" {
  command = ["a"]
  template {
    contents    = "x"
    destination = "x"
    change_mode = "noop"
    signal      = "HUP"
  }
}`, []string{"Signal not used"}},
		{"leader options in standby mode", `service "a" {
  command = ["a"]
  leader {
    tag         = "boss"
    change_mode = "signal"
  }
}`, []string{"Not used in standby mode", "Not used in standby mode"}},
		{"leader signal without signal mode", `service "a" {
  command = ["a"]
  leader {
    mode   = "tag"
    signal = "USR1"
  }
}`, []string{"Signal not used"}},
		{"change_mode with env", `service "a" {
  command = ["a"]
  template {
    contents    = "A=1"
    destination = "a.env"
    env         = true
    change_mode = "signal"
    signal      = "USR1"
  }
}`, []string{"change_mode not used"}},
		{"change_mode noop with env", `service "a" {
  command = ["a"]
  template {
    contents    = "A=1"
    destination = "a.env"
    change_mode = "noop"
    env         = true
  }
}`, []string{"change_mode not used"}},
		{"env with restart is consistent", `service "a" {
  command = ["a"]
  template {
    contents    = "A=1"
    destination = "a.env"
    env         = true
    change_mode = "restart"
  }
}`, nil},
		{"count zero", `service "a" {
  command = ["a"]
  count   = 0
}`, []string{"No instance will run"}},
		{"group count zero", `group "g" {
  count = 0
  service "a" {
    command = ["a"]
  }
}`, []string{"No instance will run"}},
		{"reschedule attempts with unlimited", `service "a" {
  command = ["a"]
  count   = 2
  reschedule {
    unlimited = true
    attempts  = 3
    interval  = "1h"
  }
}`, []string{"attempts not used"}},
		{"cluster service", `service "a" {
  command = ["a"]
  count   = 2
  constraint {
    attribute = "node.meta.zone"
    value     = "z1"
  }
}`, nil},
		{"no warnings", `service "a" {
  command = ["a"]
  check "c" {
    ttl = "10s"
  }
  restart { on_unhealthy = true }
}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, diags := loadSrc(t, t.TempDir(), tt.src, LoadOptions{Environ: []string{}})
			if diags.HasErrors() || cfg == nil {
				t.Fatalf("errors: %s", diags.Error())
			}
			var got []string
			for _, d := range diags.All() {
				if d.Severity != "warning" || d.Range == nil {
					t.Errorf("unexpected %+v", d)
				}
				got = append(got, d.Summary)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("warnings = %q, want %q", got, tt.want)
			}
			if diags.WarningCount() != len(tt.want) || diags.ErrorCount() != 0 {
				t.Errorf("counts: %d warnings, %d errors", diags.WarningCount(), diags.ErrorCount())
			}
		})
	}
}

// TestEnvChangeModeWarningRange: the warning points at change_mode.
func TestEnvChangeModeWarningRange(t *testing.T) {
	_, diags := loadSrc(t, t.TempDir(), `service "a" {
  command = ["a"]
  template {
    contents    = "A=1"
    destination = "a.env"
    env         = true
    change_mode = "signal"
  }
}`, LoadOptions{Environ: []string{}})
	all := diags.All()
	if len(all) != 1 || all[0].Range == nil || all[0].Range.Start.Line != 7 || all[0].Range.Start.Column != 5 ||
		all[0].Range.End.Column != 16 || !strings.Contains(all[0].Detail, "change_mode is ignored with env = true; an env template restarts the process") {
		t.Fatalf("diagnostics %+v", all)
	}
}
