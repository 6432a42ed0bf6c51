package schema

import (
	"bytes"
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
)

// maxNesting bounds how deeply brackets, braces, parentheses, strings and
// templates may nest. HCL's parser is recursive and slows down superlinearly
// with depth, and a deep enough input overflows the stack, which no recover
// can catch; real service files nest a handful of levels.
const maxNesting = 100

// utf8BOM is stripped: editors on some systems write it and HCL rejects it.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// parseHCL parses HCL native syntax after the nesting check.
func parseHCL(src []byte, filename string) (*hcl.File, hcl.Diagnostics) {
	src = bytes.TrimPrefix(src, utf8BOM)
	if diags := checkNesting(src, filename); diags.HasErrors() {
		return nil, diags
	}
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	return f, capSyntaxErrors(diags)
}

// maxSyntaxErrors bounds the syntax errors reported per file: after the
// first few, HCL's error recovery mostly reports consequences of them (an
// unclosed quote can yield thousands), and printing each one rescans the
// file.
const maxSyntaxErrors = 10

func capSyntaxErrors(diags hcl.Diagnostics) hcl.Diagnostics {
	if len(diags) <= maxSyntaxErrors {
		return diags
	}
	more := diags[maxSyntaxErrors]
	return append(diags[:maxSyntaxErrors:maxSyntaxErrors], &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Too many syntax errors",
		Detail: fmt.Sprintf("%d more syntax errors in this file are not shown; they usually follow from the ones above. Fix those first.",
			len(diags)-maxSyntaxErrors),
		Subject: more.Subject,
	})
}

// checkNesting lexes src (linear time) and reports the first token nested
// deeper than maxNesting.
func checkNesting(src []byte, filename string) hcl.Diagnostics {
	tokens, _ := hclsyntax.LexConfig(src, filename, hcl.InitialPos)
	depth := 0
	for _, tok := range tokens {
		switch tok.Type {
		case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen,
			hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl,
			hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
			depth++
			if depth > maxNesting {
				return hcl.Diagnostics{{
					Severity: hcl.DiagError,
					Summary:  "Nesting too deep",
					Detail: fmt.Sprintf("Brackets, braces, parentheses, strings and templates nest more than %d levels deep here; mariposa refuses such files rather than risk exhausting its stack.",
						maxNesting),
					Subject: tok.Range.Ptr(),
				}}
			}
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen,
			hclsyntax.TokenTemplateSeqEnd, hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// Format returns src (one service file) in canonical HCL form, or the
// syntax errors that prevent formatting it. The result is a fixed point:
// formatting it again returns it unchanged. A UTF-8 byte order mark is
// dropped.
func Format(src []byte, filename string) ([]byte, *Diagnostics) {
	src = bytes.TrimPrefix(src, utf8BOM)
	f, diags := parseHCL(src, filename)
	d := &Diagnostics{diags: diags, files: map[string]*hcl.File{filename: {Bytes: src}}}
	if f != nil {
		d.files[filename] = f
	}
	if diags.HasErrors() {
		return nil, d
	}
	out := hclwrite.Format(src)
	// hclwrite.Format is a token-level pass; repeat until nothing changes so
	// that formatting is idempotent even where a single pass is not.
	for i := 0; i < 8; i++ {
		next := hclwrite.Format(out)
		if bytes.Equal(next, out) {
			break
		}
		out = next
	}
	return out, d
}
