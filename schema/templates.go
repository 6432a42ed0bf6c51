package schema

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// TemplateError is a problem in a template's text, as a
// LoadOptions.CheckTemplate function reports it, positioned in that text.
type TemplateError struct {
	Summary string // e.g. "Unknown template function"
	Message string // what the parser says, e.g. `function "kye" not defined`
	Hint    string // a sentence to act on, or ""
	// Line counts from 1; 0 means the position is unknown. Column counts
	// characters from 1; 0 means only the line is known.
	Line, Column int
	// Offset is the byte offset of the problem in the text and Length its
	// length in bytes; meaningful when Column is set.
	Offset, Length int
}

// Error renders "LINE:COL: message" (or "LINE: message").
func (e *TemplateError) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Message)
	case e.Line > 0:
		return fmt.Sprintf("%d: %s", e.Line, e.Message)
	}
	return e.Message
}

// checkTemplate runs LoadOptions.CheckTemplate on a decoded template and
// reports its problem at the position in the source file, or mapped into
// the HCL file for inline contents.
func (l *loader) checkTemplate(t *Template, attr *hcl.Attribute, p *parsed, srcName string) {
	if l.opts.CheckTemplate == nil {
		return
	}
	var text string
	if t.Source != "" {
		data, err := os.ReadFile(t.Source)
		if err != nil {
			l.errorf(attr.Expr.Range(), "Template source not found", "Cannot read the template source %s: %v.", t.Source, errorsCause(err))
			return
		}
		text = string(data)
	} else {
		text = t.Contents
	}
	err := l.opts.CheckTemplate(text)
	if err == nil {
		return
	}
	var te *TemplateError
	if !errors.As(err, &te) || te == nil {
		te = &TemplateError{Summary: "Invalid template", Message: err.Error()}
	}
	tc := *te // adjusted below; the checker's error stays as it was
	te = &tc
	if te.Length < 0 || te.Offset < 0 {
		te.Column = 0 // a position we cannot trust: keep the line only
	}
	if te.Summary == "" {
		te.Summary = "Invalid template"
	}
	detail := func(where string) string {
		d := fmt.Sprintf("The template %s does not parse: %s.", where, strings.TrimSuffix(te.Message, "."))
		if te.Hint != "" {
			d += " " + te.Hint
		}
		return d
	}

	if t.Source != "" {
		// The template's own file: register it so the diagnostic shows the line.
		if _, ok := l.files[srcName]; !ok {
			l.files[srcName] = &hcl.File{Bytes: []byte(text)}
			l.order = append(l.order, srcName)
		}
		if _, off, ok := textLine(text, te.Line); ok && te.Line > 0 {
			rng, _ := textRange(srcName, text, te, hcl.Pos{Line: te.Line, Column: 1, Byte: off}, "")
			l.diags = append(l.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: te.Summary,
				Detail: detail(filepath.Base(srcName)), Subject: &rng})
			return
		}
		l.errorf(attr.Expr.Range(), te.Summary, "%s", detail(srcName+positionNote(te)))
		return
	}
	if rng, ok := l.inlineRange(attr, p, text, te); ok {
		l.diags = append(l.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: te.Summary,
			Detail: detail("contents"), Subject: &rng})
		return
	}
	l.errorf(attr.Expr.Range(), te.Summary, "%s", detail("contents"+positionNote(te)))
}

// positionNote says where in the text a problem is when the diagnostic
// cannot point there itself.
func positionNote(te *TemplateError) string {
	switch {
	case te.Line > 0 && te.Column > 0:
		return fmt.Sprintf(" (line %d, column %d)", te.Line, te.Column)
	case te.Line > 0:
		return fmt.Sprintf(" (line %d)", te.Line)
	}
	return ""
}

// textLine returns line n (from 1) of text and its byte offset.
func textLine(text string, n int) (string, int, bool) {
	off := 0
	for i := 1; i < n; i++ {
		j := strings.IndexByte(text[off:], '\n')
		if j < 0 {
			return "", 0, false
		}
		off += j + 1
	}
	line := text[off:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return strings.TrimSuffix(line, "\r"), off, true
}

// textRange is the range of te in a file where line te.Line of the text
// starts at pos, after prefix (heredoc indentation).
func textRange(filename, text string, te *TemplateError, pos hcl.Pos, prefix string) (hcl.Range, bool) {
	if te.Line < 1 {
		return hcl.Range{}, false
	}
	line, off, ok := textLine(text, te.Line)
	if !ok {
		return hcl.Range{}, false
	}
	startCol := pos.Column + utf8.RuneCountInString(prefix)
	startByte := pos.Byte + len(prefix)
	if te.Column < 1 || te.Offset < off || te.Offset > off+len(line) {
		// The whole line, from its first non-blank character.
		trimmed := strings.TrimLeft(line, " \t")
		lead := line[:len(line)-len(trimmed)]
		return hcl.Range{
			Filename: filename,
			Start:    hcl.Pos{Line: pos.Line, Column: startCol + utf8.RuneCountInString(lead), Byte: startByte + len(lead)},
			End:      hcl.Pos{Line: pos.Line, Column: startCol + utf8.RuneCountInString(line), Byte: startByte + len(line)},
		}, true
	}
	in := te.Offset - off
	end := min(in+te.Length, len(line))
	return hcl.Range{
		Filename: filename,
		Start:    hcl.Pos{Line: pos.Line, Column: startCol + utf8.RuneCountInString(line[:in]), Byte: startByte + in},
		End:      hcl.Pos{Line: pos.Line, Column: startCol + utf8.RuneCountInString(line[:end]), Byte: startByte + end},
	}, true
}

// inlineRange maps te into the HCL file when the contents are a heredoc or
// a quoted string whose offending line reads in the source exactly as in
// the template (no interpolation or escape changed it); else ok is false.
func (l *loader) inlineRange(attr *hcl.Attribute, p *parsed, text string, te *TemplateError) (hcl.Range, bool) {
	if te.Line < 1 || p.file == nil {
		return hcl.Range{}, false
	}
	src := p.file.Bytes
	rng := attr.Expr.Range()
	if rng.Start.Byte < 0 || rng.End.Byte > len(src) || rng.Start.Byte >= rng.End.Byte {
		return hcl.Range{}, false
	}
	want, _, ok := textLine(text, te.Line)
	if !ok {
		return hcl.Range{}, false
	}
	expr := string(src[rng.Start.Byte:rng.End.Byte])
	switch {
	case strings.HasPrefix(expr, "<<"):
		// Line n of the text is line n after the opening marker.
		nl := strings.IndexByte(expr, '\n')
		if nl < 0 {
			return hcl.Range{}, false
		}
		lineStart := rng.Start.Byte + nl + 1
		for i := 1; i < te.Line; i++ {
			j := strings.IndexByte(string(src[lineStart:rng.End.Byte]), '\n')
			if j < 0 {
				return hcl.Range{}, false
			}
			lineStart += j + 1
		}
		rest := string(src[lineStart:rng.End.Byte])
		j := strings.IndexByte(rest, '\n')
		if j < 0 {
			return hcl.Range{}, false // the closing marker's line
		}
		got := strings.TrimSuffix(rest[:j], "\r")
		// <<- strips the common indentation: the rest must match exactly.
		if !strings.HasSuffix(got, want) || strings.Trim(got[:len(got)-len(want)], " \t") != "" {
			return hcl.Range{}, false
		}
		prefix := got[:len(got)-len(want)]
		return textRange(attr.Expr.Range().Filename, text, te,
			hcl.Pos{Line: rng.Start.Line + te.Line, Column: 1, Byte: lineStart}, prefix)
	case strings.HasPrefix(expr, `"`) && rng.Start.Line == rng.End.Line:
		return quotedRange(src, rng, text, te)
	}
	return hcl.Range{}, false
}

// quotedRange maps te into a one-line quoted string by undoing its escapes;
// ok is false when an interpolation or an unknown escape makes the string
// differ from the text.
func quotedRange(src []byte, rng hcl.Range, text string, te *TemplateError) (hcl.Range, bool) {
	body := string(src[rng.Start.Byte+1 : rng.End.Byte-1])
	if !strings.HasSuffix(string(src[rng.Start.Byte:rng.End.Byte]), `"`) {
		return hcl.Range{}, false
	}
	// at[i] is the source offset (within body) of text byte i.
	at := make([]int, 0, len(text)+1)
	var out strings.Builder
	for i := 0; i < len(body); {
		c := body[i]
		n, emit := 1, string(c)
		switch {
		case c == '\\' && i+1 < len(body):
			n = 2
			switch body[i+1] {
			case 'n':
				emit = "\n"
			case 't':
				emit = "\t"
			case 'r':
				emit = "\r"
			case '"', '\\':
				emit = body[i+1 : i+2]
			default:
				return hcl.Range{}, false // \u escapes: rare in templates
			}
		case strings.HasPrefix(body[i:], "$${") || strings.HasPrefix(body[i:], "%%{"):
			n, emit = 3, body[i+1:i+3]
		case strings.HasPrefix(body[i:], "${") || strings.HasPrefix(body[i:], "%{"):
			return hcl.Range{}, false
		}
		for range len(emit) {
			at = append(at, i)
		}
		out.WriteString(emit)
		i += n
	}
	at = append(at, len(body))
	if out.String() != text {
		return hcl.Range{}, false
	}
	var from, to int
	if te.Column > 0 && te.Offset >= 0 && te.Offset+te.Length <= len(text) {
		from, to = te.Offset, te.Offset+te.Length
	} else {
		line, off, ok := textLine(text, te.Line)
		if !ok {
			return hcl.Range{}, false
		}
		trimmed := strings.TrimLeft(line, " \t")
		from, to = off+len(line)-len(trimmed), off+len(line)
	}
	pos := func(i int) hcl.Pos {
		b := at[i]
		return hcl.Pos{Line: rng.Start.Line, Column: rng.Start.Column + 1 + utf8.RuneCountInString(body[:b]), Byte: rng.Start.Byte + 1 + b}
	}
	return hcl.Range{Filename: rng.Filename, Start: pos(from), End: pos(to)}, true
}
