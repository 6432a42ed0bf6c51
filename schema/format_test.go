package schema

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	tests := []struct{ in, want string }{
		{"service \"a\" {\ncommand=[\"x\",\"y\"]\n    port = 1\n}\n", "service \"a\" {\n  command = [\"x\", \"y\"]\n  port    = 1\n}\n"},
		{"\xEF\xBB\xBFa = 1\n", "a = 1\n"},
		{"x = <<EOT\n  keep   this\nEOT\n", "x = <<EOT\n  keep   this\nEOT\n"},
		{"", ""},
		{"service \"a\" {\ncount=2\nconstraint{\nattribute=\"node.meta.zone\"\noperator=\"!=\"\n}\nspread {\n  attribute = \"node.meta.zone\"\n target \"z1\" { percent = 50 }\n}\n}\n",
			"service \"a\" {\n  count = 2\n  constraint {\n    attribute = \"node.meta.zone\"\n    operator  = \"!=\"\n  }\n  spread {\n    attribute = \"node.meta.zone\"\n    target \"z1\" { percent = 50 }\n  }\n}\n"},
		{"service \"a\" {\ncount=2\nupdate{\nmax_parallel=2\nhealth_check=\"checks\"\n  min_healthy_time = \"10s\"\n}\n}\n",
			"service \"a\" {\n  count = 2\n  update {\n    max_parallel     = 2\n    health_check     = \"checks\"\n    min_healthy_time = \"10s\"\n  }\n}\n"},
	}
	for _, tt := range tests {
		got, diags := Format([]byte(tt.in), "t.hcl")
		if diags.HasErrors() {
			t.Errorf("Format(%q): %s", tt.in, diags.Error())
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Format(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if _, diags := Format([]byte("service \"a\" {\n"), "t.hcl"); !diags.HasErrors() {
		t.Errorf("unterminated block formatted without error")
	}
}

func TestNestingLimit(t *testing.T) {
	ok := "x = " + strings.Repeat("[", maxNesting) + strings.Repeat("]", maxNesting) + "\n"
	if _, diags := Format([]byte(ok), "t.hcl"); diags.HasErrors() {
		t.Errorf("%d levels rejected: %s", maxNesting, diags.Error())
	}
	deep := "x = " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n"
	for _, err := range []string{loadBytesErr(t, deep), formatErr(deep)} {
		if !strings.Contains(err, "t.hcl:1:") || !strings.Contains(err, "Nesting too deep") {
			t.Errorf("deep nesting: %q", err)
		}
	}
}

func loadBytesErr(t *testing.T, src string) string {
	_, diags := load([]source{{name: "t.hcl", abs: "/nonexistent/t.hcl", data: []byte(src)}}, LoadOptions{Environ: []string{}})
	var buf bytes.Buffer
	if err := diags.WriteText(&buf, 80, false); err != nil {
		t.Fatal(err)
	}
	return diags.Error()
}

func formatErr(src string) string {
	_, diags := Format([]byte(src), "t.hcl")
	return diags.Error()
}

// FuzzFormat checks that formatting never panics, is idempotent, and keeps
// the meaning: a formatted file parses whenever the input did.
func FuzzFormat(f *testing.F) {
	addFixtureSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		out, diags := Format(data, "fuzz.hcl")
		if diags.HasErrors() {
			return
		}
		again, diags2 := Format(out, "fuzz.hcl")
		if diags2.HasErrors() {
			t.Fatalf("formatted output does not parse: %s\n%q", diags2.Error(), out)
		}
		if !bytes.Equal(out, again) {
			t.Fatalf("not idempotent:\n%q\n%q", out, again)
		}
	})
}

func TestWriteText(t *testing.T) {
	_, diags := load([]source{{name: "t.hcl", abs: "/nonexistent/t.hcl", data: []byte("service \"a\" {\n  command = []\n}\n")}},
		LoadOptions{Environ: []string{}})
	for _, color := range []bool{false, true} {
		var buf bytes.Buffer
		if err := diags.WriteText(&buf, 0, color); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		sev := "Error"
		if color {
			sev = "\x1b[31mError\x1b[0m"
		}
		for _, want := range []string{sev + ": t.hcl:2:13: Empty command\n", "on t.hcl line 2, in service \"a\":", "2:   command = "} {
			if !strings.Contains(out, want) {
				t.Errorf("color=%v: output lacks %q:\n%s", color, want, out)
			}
		}
	}
	if got := diags.Error(); !strings.HasPrefix(got, "t.hcl:2:13: Empty command; Service \"a\" needs a command") {
		t.Errorf("Error() = %q", got)
	}
	js, err := diags.MarshalJSON()
	if err != nil || !strings.Contains(string(js), `"range":{"filename":"t.hcl","start":{"line":2,"column":13,"byte":26},"end":{"line":2,"column":15,"byte":28}}`) {
		t.Errorf("JSON = %s, %v", js, err)
	}
	var nilDiags *Diagnostics
	if nilDiags.HasErrors() || nilDiags.Len() != 0 || nilDiags.Error() != "" || nilDiags.WriteText(&bytes.Buffer{}, 0, false) != nil {
		t.Errorf("nil diagnostics misbehave")
	}
	if js, _ := nilDiags.MarshalJSON(); string(js) != "[]" {
		t.Errorf("nil JSON = %s", js)
	}
}

func TestDiagnosticCaps(t *testing.T) {
	// An unclosed quote turns the rest into thousands of syntax errors.
	src := "service \"a> {\n" + strings.Repeat("service \"a\" {\n", 2000)
	_, diags := load([]source{{name: "t.hcl", abs: "/nonexistent/t.hcl", data: []byte(src)}}, LoadOptions{Environ: []string{}})
	all := diags.All()
	if len(all) != maxSyntaxErrors+1 || all[len(all)-1].Summary != "Too many syntax errors" || !diags.HasErrors() {
		t.Errorf("got %d diagnostics, last %+v", len(all), all[len(all)-1])
	}

	// Many services, each with an error.
	src = ""
	for i := 0; i < 300; i++ {
		src += "service \"s" + strconv.Itoa(i) + "\" {\n  command = []\n}\n"
	}
	_, diags = load([]source{{name: "t.hcl", abs: "/nonexistent/t.hcl", data: []byte(src)}}, LoadOptions{Environ: []string{}})
	all = diags.All()
	last := all[len(all)-1]
	if len(all) != maxDiagnostics || last.Summary != "Too many problems" || last.Severity != "error" ||
		!strings.Contains(last.Detail, "101 more errors") || last.Range == nil || last.Range.Start.Line != 200*3-1 {
		t.Errorf("got %d diagnostics, last %+v %+v", len(all), last, last.Range)
	}
}
