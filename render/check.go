package render

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/template/parse"
	"unicode/utf8"

	ctemplate "github.com/hashicorp/consul-template/template"

	"github.com/mariposa-sh/mariposa/schema"
)

// CheckTemplate parses a template's text exactly as the renderer will, with
// the same functions, and returns the first problem as a
// *schema.TemplateError positioned in the text: a syntax error, a function
// that does not exist, one mariposa removed (plugin, writeToFile,
// executeTemplate, Vault and Nomad), or a {{ template }} that names no
// {{ define }}. It runs nothing and reads no data. nil: the text parses.
// It is what schema.LoadOptions.CheckTemplate expects.
func CheckTemplate(text string) error {
	if te := checkTemplate(text); te != nil {
		return te
	}
	return nil
}

// parseSentinel is a function no template can have: appended to a text that
// parses, it makes the real parse fail after everything else was checked, so
// nothing is ever executed.
const parseSentinel = "__mariposa_parse_check__"

// parseErr reads text/template's "template: NAME:LINE: message" (some
// errors also carry a column).
var parseErr = lazyRE(`^(?:parse: )?template: [^:]*:(\d+):(?:(\d+):)? ?(.*)$`)

func checkTemplate(text string) *schema.TemplateError {
	// First without functions: syntax errors anywhere, and every tree to
	// walk, including branches that would never run.
	tr := parse.New("template")
	tr.Mode = parse.SkipFuncCheck
	trees := map[string]*parse.Tree{}
	if _, err := tr.Parse(text, "", "", trees); err != nil {
		return parseError(text, "Template syntax error", err.Error())
	}
	var idents []*parse.IdentifierNode
	var calls []*parse.TemplateNode
	for _, t := range trees {
		walk(t.Root, func(n parse.Node) {
			switch n := n.(type) {
			case *parse.IdentifierNode:
				idents = append(idents, n)
			case *parse.TemplateNode:
				calls = append(calls, n)
			}
		})
	}
	// Trees come from a map: report the first problem in the text.
	sort.Slice(idents, func(i, j int) bool { return idents[i].Pos < idents[j].Pos })
	sort.Slice(calls, func(i, j int) bool { return calls[i].Pos < calls[j].Pos })
	for _, id := range idents {
		if _, bad := removed[id.Ident]; bad {
			te := at(text, int(id.Pos), len(id.Ident))
			te.Summary = "Template function not available"
			te.Message = removedErr(id.Ident).Error()
			return te
		}
	}

	// Then with the renderer's own function map (consul-template's,
	// Sprig's as sprig_*, and the sandbox's), which only consul-template
	// can build: parse through it with the sentinel at the end.
	// parseWithFuncs never returns nil (a text that parses fails on the
	// sentinel), so only a failure before the sentinel is the text's own.
	{
		msg := parseWithFuncs(text).Error()
		m := parseErr().FindStringSubmatch(msg)
		if m == nil || !strings.Contains(m[3], parseSentinel) {
			te := parseError(text, "Template syntax error", msg)
			if name, ok := undefinedFunc(te.Message); ok {
				te.Summary = "Unknown template function"
				if s := suggestFunc(name); s != "" {
					te.Hint = fmt.Sprintf("Did you mean %q?", s)
				}
				// The parser gives the line only; the tree has the column.
				for _, id := range idents {
					if id.Ident == name && lineOf(text, int(id.Pos)) == te.Line {
						pos := at(text, int(id.Pos), len(name))
						te.Column, te.Offset, te.Length = pos.Column, pos.Offset, pos.Length
						break
					}
				}
			}
			return te
		}
	}

	// {{ template "x" }} of an undefined x fails at every render.
	for _, c := range calls {
		if _, ok := trees[c.Name]; !ok {
			te := at(text, int(c.Pos), 0)
			if q := strconv.Quote(c.Name); strings.HasPrefix(text[c.Pos:], q) {
				te.Length = len(q)
			}
			te.Summary = "Undefined template"
			te.Message = fmt.Sprintf("template %q is not defined", c.Name)
			te.Hint = fmt.Sprintf(`Define it with {{ define %q }}...{{ end }} in the same template.`, c.Name)
			return te
		}
	}
	return nil
}

// parseWithFuncs parses text with the renderer's functions; a text that
// parses fails on the sentinel, so the result is never nil.
func parseWithFuncs(text string) error {
	ct, err := ctemplate.NewTemplate(&ctemplate.NewTemplateInput{
		Contents:   text + "{{" + parseSentinel + "}}",
		ExtFuncMap: (&sandbox{}).funcs(),
	})
	if err != nil {
		return err
	}
	_, err = ct.Execute(&ctemplate.ExecuteInput{Brain: ctemplate.NewBrain()})
	if err == nil {
		// Cannot happen: the sentinel is not a function.
		return fmt.Errorf("template: :1: function %q not defined", parseSentinel)
	}
	return err
}

// parseError turns text/template's message into a TemplateError with its line.
func parseError(text, summary, msg string) *schema.TemplateError {
	te := &schema.TemplateError{Summary: summary, Message: msg}
	if m := parseErr().FindStringSubmatch(msg); m != nil {
		te.Message = m[3]
		if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 && n <= strings.Count(text, "\n")+1 {
			te.Line = n
		}
	}
	return te
}

var undefinedRe = lazyRE(`^function "([^"]*)" not defined$`)

func undefinedFunc(msg string) (string, bool) {
	m := undefinedRe().FindStringSubmatch(msg)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// at positions a problem at byte offset off of text, length n bytes.
func at(text string, off, n int) *schema.TemplateError {
	if off < 0 || off > len(text) {
		return &schema.TemplateError{}
	}
	start := strings.LastIndexByte(text[:off], '\n') + 1
	return &schema.TemplateError{
		Line:   lineOf(text, off),
		Column: utf8.RuneCountInString(text[start:off]) + 1,
		Offset: off,
		Length: min(n, len(text)-off),
	}
}

func lineOf(text string, off int) int {
	return strings.Count(text[:off], "\n") + 1
}

// knownFuncs are candidates for "did you mean": consul-template's own
// functions and text/template's builtins. suggestFunc confirms a candidate
// parses before offering it, so a stale entry only costs a suggestion.
var knownFuncs = []string{
	"and", "call", "eq", "ge", "gt", "html", "index", "js", "le", "len", "lt", "ne", "not", "or",
	"print", "printf", "println", "slice", "urlquery",
	"datacenters", "exportedServices", "file", "key", "keyExists", "keyOrDefault", "ls", "safeLs",
	"node", "nodes", "partitions", "peerings", "service", "connect", "services", "tree", "safeTree",
	"caRoots", "caLeaf", "scratch",
	"base64Decode", "base64Encode", "base64URLDecode", "base64URLEncode", "byKey", "byPort", "byTag",
	"contains", "containsAll", "containsAny", "containsNone", "containsNotAll", "env", "mustEnv",
	"envOrDefault", "explode", "explodeMap", "mergeMap", "mergeMapWithOverride", "in", "indent",
	"loop", "join", "trim", "trimPrefix", "trimSuffix", "trimSpace", "parseBool", "parseFloat",
	"parseInt", "parseJSON", "parseUint", "parseYAML", "regexReplaceAll", "regexMatch", "replaceAll",
	"sha256Hex", "md5sum", "hmacSHA256Hex", "timestamp", "toLower", "toJSON", "toJSONPretty",
	"toUnescapedJSON", "toUnescapedJSONPretty", "toTitle", "toTOML", "toUpper", "toYAML", "split",
	"splitToMap", "byMeta", "sockaddr", "add", "subtract", "multiply", "divide", "modulo",
	"minimum", "maximum",
}

// suggestFunc returns the defined function nearest to name, or "".
func suggestFunc(name string) string {
	best, bestDist := "", 3 // HCL's threshold, as schema uses
	for _, f := range knownFuncs {
		if d := editDistance(name, f); d < bestDist {
			best, bestDist = f, d
		}
	}
	if best == "" {
		return ""
	}
	// Confirm against the real function map: only the sentinel may fail.
	if m := parseErr().FindStringSubmatch(parseWithFuncs("{{ " + best + " }}").Error()); m == nil || !strings.Contains(m[3], parseSentinel) {
		return ""
	}
	return best
}

// editDistance counts the insertions, deletions, substitutions and swaps of
// neighbours (the commonest typo: "kye") that turn a into b.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}
