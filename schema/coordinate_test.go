package schema

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// coordSrc is a service with one template whose body ends with extra.
func coordSrc(extra string) string {
	return "service \"s\" {\n  command = [\"s\"]\n  template {\n    contents    = \"x\"\n    destination = \"out\"\n" +
		extra + "\n  }\n}\n"
}

// TestCoordinateDecoded: a coordinate block reaches the model with its
// default, with every change_mode that restarts or signals, and with env
// templates (which always restart).
func TestCoordinateDecoded(t *testing.T) {
	for _, tt := range []struct {
		body string
		want *Coordinate
	}{
		{``, nil},
		{`    coordinate {}`, &Coordinate{MaxParallel: 1}},
		{"    change_mode = \"restart\"\n    coordinate {\n      max_parallel = 2\n    }", &Coordinate{MaxParallel: 2}},
		{"    change_mode = \"signal\"\n    coordinate {\n      max_parallel = var.n\n    }", &Coordinate{MaxParallel: 3}},
		{"    env = true\n    coordinate {}", &Coordinate{MaxParallel: 1}},
	} {
		src := "variable \"n\" {\n  default = 3\n}\n" + coordSrc(tt.body)
		cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
		if cfg == nil || diags.Len() != 0 {
			t.Errorf("%q: %s", tt.body, diags.Error())
			continue
		}
		if got := cfg.Service("s").Templates[0].Coordinate; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: Coordinate = %+v, want %+v", tt.body, got, tt.want)
		}
	}
}

// TestCoordinateJSON: specs are stored as JSON of these types, and their
// hashes are of that JSON: a template without coordinate encodes as it did
// before the block existed.
func TestCoordinateJSON(t *testing.T) {
	b, err := json.Marshal(&Template{Destination: "/x", ChangeMode: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "Coordinate") {
		t.Errorf("a template without coordinate encodes it: %s", b)
	}
	b, _ = json.Marshal(&Template{Destination: "/x", Coordinate: &Coordinate{MaxParallel: 2}})
	var back Template
	if err := json.Unmarshal(b, &back); err != nil || back.Coordinate == nil || back.Coordinate.MaxParallel != 2 {
		t.Errorf("round trip of %s: %+v, %v", b, back.Coordinate, err)
	}
}

// TestCoordinateDiagnostics checks what the diagnostics say beyond their
// summaries (which testdata/invalid/coordinate.hcl checks): where, what,
// and what to do.
func TestCoordinateDiagnostics(t *testing.T) {
	for _, tt := range []struct {
		body      string
		summary   string
		line, col int
		want      []string // in the detail
	}{
		{"    change_mode = \"noop\"\n    coordinate {\n      max_parallel = 2\n    }", "Nothing to coordinate", 7, 5,
			[]string{`change_mode = "noop" neither restarts nor signals the process`,
				`Use change_mode = "restart" or "signal", or remove the coordinate block.`}},
		{"    change_mode = \"command\"\n    command     = [\"reload\"]\n    coordinate {}", "Nothing to coordinate", 8, 5,
			[]string{`change_mode = "command" runs the template's command instead`,
				`Use change_mode = "restart" or "signal", or remove the coordinate block.`}},
		{"    coordinate {\n      max_parallel = 0\n    }", "Invalid max_parallel", 7, 22,
			[]string{`max_parallel is how many instances of service "s" restart or signal at once after a change of this template, from 1 to 10000; got 0.`,
				`To let every instance act at once, remove the coordinate block.`}},
		{"    coordinate {\n      max_parallel = -1\n    }", "Invalid max_parallel", 7, 22, []string{`got -1.`}},
		{"    coordinate {\n      max_parallel = 1.5\n    }", "Invalid number", 7, 22, []string{`"max_parallel" must be a whole number, got 1.5.`}},
		{"    coordinate {\n      max_paralel = 2\n    }", "Unsupported argument", 7, 7, []string{`Did you mean "max_parallel"?`}},
		{"    coordinate {}\n    coordinate {}", "Duplicate coordinate block", 7, 5,
			[]string{`This template already has a coordinate block at `, `main.hcl:6:5; there can be only one.`}},
	} {
		_, diags := loadSrc(t, t.TempDir(), coordSrc(tt.body), LoadOptions{Environ: []string{}})
		all := diags.All()
		if len(all) != 1 {
			t.Errorf("%q: %d diagnostics, want 1:\n%s", tt.body, len(all), diags.Error())
			continue
		}
		d := all[0]
		if d.Severity != "error" || d.Summary != tt.summary {
			t.Errorf("%q: %s %q, want error %q", tt.body, d.Severity, d.Summary, tt.summary)
		}
		if d.Range == nil || !strings.HasSuffix(d.Range.Filename, "main.hcl") || d.Range.Start.Line != tt.line || d.Range.Start.Column != tt.col {
			t.Errorf("%q: at %+v, want main.hcl:%d:%d", tt.body, d.Range, tt.line, tt.col)
		}
		for _, w := range tt.want {
			if !strings.Contains(d.Detail, w) {
				t.Errorf("%q: detail %q lacks %q", tt.body, d.Detail, w)
			}
		}
	}
}
