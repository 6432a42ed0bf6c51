package schema

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// stubCheck stands in for render.CheckTemplate (schema cannot import
// render): "BAD" is a problem at its position, "LINEONLY" one known by
// line only, "PLAIN" an error without a position.
func stubCheck(text string) error {
	if i := strings.Index(text, "BAD"); i >= 0 {
		start := strings.LastIndexByte(text[:i], '\n') + 1
		return &TemplateError{Summary: "Stub problem", Message: "bad here", Hint: "Fix it.",
			Line: strings.Count(text[:i], "\n") + 1, Column: utf8.RuneCountInString(text[start:i]) + 1, Offset: i, Length: 3}
	}
	if i := strings.Index(text, "LINEONLY"); i >= 0 {
		return &TemplateError{Summary: "Stub problem", Message: "somewhere on this line", Line: strings.Count(text[:i], "\n") + 1}
	}
	if strings.Contains(text, "PLAIN") {
		return errors.New("plain trouble")
	}
	return nil
}

func TestTemplateCheckPositions(t *testing.T) {
	type pos struct{ line, col, endCol int } // endCol -1: the range spans lines
	tests := []struct {
		name    string
		hcl     string
		tpl     string // written as t.tpl next to the HCL file
		file    string // "tpl" when the diagnostic is in t.tpl
		summary string
		at      pos
		detail  string // a substring
	}{
		{"indented heredoc", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = <<-EOT
      line one
        x = {{ BAD }}
    EOT
  }
}`, "", "", "Stub problem", pos{7, 16, 19}, "The template contents does not parse: bad here. Fix it."},
		{"plain heredoc", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = <<EOT
one
two BAD
EOT
  }
}`, "", "", "Stub problem", pos{7, 5, 8}, "bad here"},
		{"heredoc with interpolation on another line", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = <<-EOT
      name = ${upper("a")}
      BAD
    EOT
  }
}`, "", "", "Stub problem", pos{7, 7, 10}, "bad here"},
		{"heredoc with interpolation on that line", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = <<-EOT
      first
      ${upper("a")} BAD
    EOT
  }
}`, "", "", "Stub problem", pos{5, 19, -1}, "contents (line 2, column 3) does not parse"},
		{"heredoc line only", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = <<-EOT
      first
        LINEONLY here
    EOT
  }
}`, "", "", "Stub problem", pos{7, 9, 22}, "somewhere on this line"},
		{"quoted", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = "x BAD"
  }
}`, "", "", "Stub problem", pos{5, 22, 25}, "bad here"},
		{"quoted with escapes", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = "x\nBAD"
  }
}`, "", "", "Stub problem", pos{5, 23, 26}, "bad here"},
		{"quoted with escaped quotes", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = "{{ key \"a\" }} BAD"
  }
}`, "", "", "Stub problem", pos{5, 36, 39}, "bad here"},
		{"quoted line only after an escaped newline", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = "x\n  LINEONLY"
  }
}`, "", "", "Stub problem", pos{5, 25, 33}, "somewhere"},
		{"quoted with interpolation", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = "${upper("a")} BAD"
  }
}`, "", "", "Stub problem", pos{5, 19, 38}, "(line 1, column 3)"},
		{"quoted with escaped interpolation", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = "$${x} BAD"
  }
}`, "", "", "Stub problem", pos{5, 26, 29}, "bad here"},
		{"contents from file()", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = file("t.tpl")
  }
}`, "a\nBAD\n", "", "Stub problem", pos{5, 19, 32}, "(line 2, column 1)"},
		{"plain error", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = "PLAIN"
  }
}`, "", "", "Invalid template", pos{5, 19, 26}, "does not parse: plain trouble."},
		{"source file", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    source      = "t.tpl"
  }
}`, "# conf\n\tport = {{ BAD }}\n", "tpl", "Stub problem", pos{2, 12, 15}, "The template t.tpl does not parse: bad here. Fix it."},
		{"source file line only", `service "a" {
  command = ["a"]
  template {
    destination = "out"
    source      = "t.tpl"
  }
}`, "# conf\n\n  LINEONLY\n", "tpl", "Stub problem", pos{3, 3, 11}, "somewhere on this line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.tpl != "" {
				write(t, dir, "t.tpl", tt.tpl)
			}
			p := write(t, dir, "main.hcl", tt.hcl)
			cfg, diags := Load([]string{p}, LoadOptions{Environ: []string{}, CheckTemplate: stubCheck})
			if cfg != nil || diags.ErrorCount() != 1 {
				t.Fatalf("want exactly one error, got:\n%s", diags.Error())
			}
			d := diags.All()[0]
			wantFile := p
			if tt.file == "tpl" {
				wantFile = filepath.Join(dir, "t.tpl")
			}
			if d.Summary != tt.summary || d.Range == nil || d.Range.Filename != wantFile ||
				d.Range.Start.Line != tt.at.line || d.Range.Start.Column != tt.at.col ||
				(tt.at.endCol >= 0 && (d.Range.End.Line != tt.at.line || d.Range.End.Column != tt.at.endCol)) ||
				!strings.Contains(d.Detail, tt.detail) {
				t.Fatalf("got %+v at %+v\nwant %q at %s:%d:%d-%d, detail ~%q", d, d.Range, tt.summary, wantFile, tt.at.line, tt.at.col, tt.at.endCol, tt.detail)
			}
			// Byte offsets agree with lines and columns: the text printer
			// underlines what the header names.
			var buf bytes.Buffer
			if err := diags.WriteText(&buf, 0, false); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			if !strings.Contains(out, "Error: "+wantFile+":"+itoa(tt.at.line)+":"+itoa(tt.at.col)+": "+tt.summary) {
				t.Errorf("text output lacks the header:\n%s", out)
			}
			if strings.Contains(out, "source code not available") {
				t.Errorf("text output has no source line:\n%s", out)
			}
		})
	}
}

func TestTemplateCheckOff(t *testing.T) {
	cfg, diags := loadSrc(t, t.TempDir(), `service "a" {
  command = ["a"]
  template {
    destination = "out"
    contents    = "BAD"
  }
}`, LoadOptions{Environ: []string{}})
	if cfg == nil || diags.Len() != 0 {
		t.Fatalf("without CheckTemplate: %s", diags.Error())
	}
}

// TestTemplateCheckEveryTemplate: every template is checked and each
// problem reported, sorted with the rest.
func TestTemplateCheckEveryTemplate(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.tpl", "BAD")
	p := write(t, dir, "main.hcl", `service "a" {
  command = ["a"]
  port    = 70000
  template {
    destination = "one"
    source      = "a.tpl"
  }
  template {
    destination = "two"
    contents    = "ok"
  }
  template {
    destination = "three"
    contents    = "BAD"
  }
}`)
	_, diags := Load([]string{p}, LoadOptions{Environ: []string{}, CheckTemplate: stubCheck})
	var got []string
	for _, d := range diags.All() {
		got = append(got, filepath.Base(d.Range.Filename)+":"+itoa(d.Range.Start.Line)+" "+d.Summary)
	}
	want := "main.hcl:3 Port out of range|main.hcl:14 Stub problem|a.tpl:1 Stub problem"
	if strings.Join(got, "|") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
}
