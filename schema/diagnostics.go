package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Diagnostics are the problems found while loading a configuration, with the
// parsed files kept so they can be printed with their source lines.
type Diagnostics struct {
	diags hcl.Diagnostics
	files map[string]*hcl.File
}

// Diagnostic is one problem in plain form, for callers that do not print text.
type Diagnostic struct {
	Severity string `json:"severity"` // "error" or "warning"
	Summary  string `json:"summary"`
	Detail   string `json:"detail,omitempty"`
	Range    *Range `json:"range,omitempty"`
}

// Range is a span of a source file; lines and columns count from 1, bytes from 0.
type Range struct {
	Filename string `json:"filename"`
	Start    Pos    `json:"start"`
	End      Pos    `json:"end"`
}

// Pos is a position in a source file.
type Pos struct {
	Line   int `json:"line"`
	Column int `json:"column"`
	Byte   int `json:"byte"`
}

// HasErrors reports whether any diagnostic is an error (warnings do not count).
func (d *Diagnostics) HasErrors() bool {
	return d != nil && d.diags.HasErrors()
}

// Len is the number of diagnostics of any severity.
func (d *Diagnostics) Len() int {
	if d == nil {
		return 0
	}
	return len(d.diags)
}

// ErrorCount and WarningCount split Len by severity.
func (d *Diagnostics) ErrorCount() int { return d.count(hcl.DiagError) }

// WarningCount is the number of warnings.
func (d *Diagnostics) WarningCount() int { return d.count(hcl.DiagWarning) }

func (d *Diagnostics) count(sev hcl.DiagnosticSeverity) int {
	if d == nil {
		return 0
	}
	n := 0
	for _, diag := range d.diags {
		if diag.Severity == sev {
			n++
		}
	}
	return n
}

// All returns every diagnostic in plain form, in the order found.
func (d *Diagnostics) All() []Diagnostic {
	if d == nil {
		return nil
	}
	out := make([]Diagnostic, 0, len(d.diags))
	for _, diag := range d.diags {
		pd := Diagnostic{
			Severity: "error",
			Summary:  diag.Summary,
			Detail:   diag.Detail,
		}
		if diag.Severity == hcl.DiagWarning {
			pd.Severity = "warning"
		}
		if diag.Subject != nil {
			r := *diag.Subject
			pd.Range = &Range{
				Filename: r.Filename,
				Start:    Pos{Line: r.Start.Line, Column: r.Start.Column, Byte: r.Start.Byte},
				End:      Pos{Line: r.End.Line, Column: r.End.Column, Byte: r.End.Byte},
			}
		}
		out = append(out, pd)
	}
	return out
}

// WriteText prints every diagnostic the way HCL tools do, with the offending
// source line underlined. width 0 means no wrapping.
func (d *Diagnostics) WriteText(w io.Writer, width uint, color bool) error {
	if d == nil || len(d.diags) == 0 {
		return nil
	}
	// HCL's writer shows the source line but no column; a header of the
	// form "Error: file:line:col: summary" gives editors and people both.
	var buf bytes.Buffer
	wr := hcl.NewDiagnosticTextWriter(&buf, d.files, width, color)
	for _, diag := range d.diags {
		buf.Reset()
		if err := wr.WriteDiagnostic(diag); err != nil {
			return err
		}
		text := buf.String()
		if diag.Subject != nil {
			sev := "Error"
			if diag.Severity == hcl.DiagWarning {
				sev = "Warning"
			}
			if color {
				// Keep HCL's colouring of the severity.
				code := "\x1b[31m"
				if diag.Severity == hcl.DiagWarning {
					code = "\x1b[33m"
				}
				sev = code + sev + "\x1b[0m"
			}
			if i := strings.IndexByte(text, '\n'); i >= 0 {
				text = fmt.Sprintf("%s: %s:%d:%d: %s%s", sev, diag.Subject.Filename,
					diag.Subject.Start.Line, diag.Subject.Start.Column, diag.Summary, text[i:])
			}
		}
		if _, err := io.WriteString(w, text); err != nil {
			return err
		}
	}
	return nil
}

// MarshalJSON encodes the diagnostics as a JSON array of Diagnostic.
func (d *Diagnostics) MarshalJSON() ([]byte, error) {
	all := d.All()
	if all == nil {
		all = []Diagnostic{}
	}
	return json.Marshal(all)
}

// Error renders one line per diagnostic: "file:line:col: summary; detail".
func (d *Diagnostics) Error() string {
	if d == nil {
		return ""
	}
	var b strings.Builder
	for i, diag := range d.diags {
		if i > 0 {
			b.WriteByte('\n')
		}
		if diag.Subject != nil {
			fmt.Fprintf(&b, "%s:%d:%d: ", diag.Subject.Filename, diag.Subject.Start.Line, diag.Subject.Start.Column)
		}
		if diag.Severity == hcl.DiagWarning {
			b.WriteString("warning: ")
		}
		b.WriteString(diag.Summary)
		if diag.Detail != "" {
			b.WriteString("; ")
			b.WriteString(strings.ReplaceAll(diag.Detail, "\n", " "))
		}
	}
	return b.String()
}
