package schema

import (
	"strings"
	"testing"
)

// TestDidYouMeanInDiagnostics checks that misspelt names get a suggestion
// in the diagnostic's detail, wherever a near valid name exists.
func TestDidYouMeanInDiagnostics(t *testing.T) {
	tests := []struct {
		body string // inside service "s" { command = ["s"] ... }
		want string
	}{
		{`prot = 80`, `Did you mean "port"?`},
		{`tgas = []`, `Did you mean "tags"?`},
		{`chekc "c" {}`, `Did you mean "check"?`},
		{`depends "db" {}`, `Did you mean "depends_on"?`},
		{`restart { policy = "alway" }`, `Did you mean "always"?`},
		{`restart { on_exhausted = "fial" }`, `Did you mean "fail"?`},
		{`restart { atempts = 1 }`, `Did you mean "attempts"?`},
		{`depends_on "db" { on_lost = "stpo" }`, `Did you mean "stop"?`},
		{`leader { mode = "tags" }`, `Did you mean "tag"?`},
		{`leader {
    mode        = "tag"
    change_mode = "nop"
  }`, `Did you mean "noop"?`},
		{`template {
    contents    = "x"
    destination = "x"
    change_mode = "sginal"
  }`, `Did you mean "signal"?`},
		{`template {
    contents    = "x"
    destination = "x"
    wiat        = {}
  }`, `Did you mean "wait"?`},
		{`template {
    contents    = "x"
    destination = "x"
    wait        = { maxx = "1s" }
  }`, `Did you mean "max"?`},
		{`stop { signal = "SIGTREM" }`, `Did you mean "SIGTERM"?`},
		{`stop { signal = "usr" }`, `Did you mean "SIGUSR1"?`},
		{`version = uper("x")`, `Did you mean "upper"?`},
		{`version = envv("x")`, `Did you mean "env"?`},
		{`version = vra.x`, `Did you mean "var"?`},
		{`dependson "db" {}`, `Did you mean "depends_on"?`},
		{`environment = {}`, `Did you mean "env"?`},
		{`restart { max = "1s" }`, `Did you mean "max_delay"?`},
		{`afinity {}`, `Did you mean "affinity"?`},
		{`constrain {}`, `Did you mean "constraint"?`},
		{`max_per_nodes = 1`, `Did you mean "max_per_node"?`},
		{`reshedule {}`, `Did you mean "reschedule"?`},
		{`updates {}`, `Did you mean "update"?`},
		{`count = 1
  update { min_healthy = "1s" }`, `Did you mean "min_healthy_time"?`},
		{`count = 1
  update { health_check = "runing" }`, `Did you mean "running"?`},
		{`count = 1
  reschedule { delay_fuction = "constant" }`, `Did you mean "delay_function"?`},
		{`count = 1
  reschedule { delay_function = "fibonaci" }`, `Did you mean "fibonacci"?`},
		{`count = 1
  constraint {
    attribute = "node.name"
    operater  = "=="
  }`, `Did you mean "operator"?`},
		{`count = 1
  spread {
    attribute = "node.name"
    targets "a" {}
  }`, `Did you mean "target"?`},
		{`count = 1
  spread {
    attribute = "node.name"
    target "a" { percentage = 5 }
  }`, `Did you mean "percent"?`},
	}
	for _, tt := range tests {
		src := "service \"s\" {\n  command = [\"s\"]\n  " + tt.body + "\n}\n"
		_, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
		if !diags.HasErrors() {
			t.Errorf("%s: no error", tt.body)
			continue
		}
		if !strings.Contains(diags.Error(), tt.want) {
			t.Errorf("%s: diagnostics lack %q:\n%s", tt.body, tt.want, diags.Error())
		}
	}
}
