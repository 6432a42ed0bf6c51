package render

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"

	dep "github.com/hashicorp/consul-template/dependency"
)

// Data read from Consul never leaves through a message. A template's
// execution error, as text/template writes it, quotes what failed: the
// function's own error (`strconv.ParseInt: parsing "<the value>"`), or the
// value itself (`range can't iterate over <the value>`). Such errors go to
// the log, the audit file, the node API, `status -json` and the
// supervisor's Consul checks, where a token that may not read the key
// reads them. So an execution error is rewritten here: its position in the
// template, the action that failed (template text, which is no data), and
// what went wrong in words chosen here, never the function's own message
// unless it is one of a few known to carry types and positions only.
//
// The rewrite works on the error's text (consul-template flattens the error
// chain), as both the vendored consul-template and its upstream module
// write it.

// execErrRE reads text/template's execution error as consul-template
// returns it: "execute: template: NAME:LINE:COL: executing "NAME" at
// <CONTEXT>: MESSAGE". CONTEXT is the failing action's template text,
// cut at 20 bytes.
var execErrRE = lazyRE(`(?s)^(?:execute: )?template: [^:]*:(\d+):(\d+): executing "[^"]*" at <(.*?)>: (.*)$`)

// callRE is a function's error, as text/template wraps it.
var callRE = lazyRE(`(?s)^error calling ([A-Za-z0-9_]+): (.*)$`)

// withheld ends a message whose details are not shown.
const withheld = "(its message is not shown: it may quote data read from Consul)"

// safeExec are text/template's own execution errors that name only types,
// fields and template text: shown as they are.
var safeExec = lazyREs(
	`^can't evaluate field [A-Za-z0-9_]+ in type [^\n]+$`,
	`^nil pointer evaluating [^\n]+$`,
	`^wrong type for value; expected [^\n]+; got [^\n]+$`,
	`^invalid value; expected [^\n]+$`,
	`^wrong number of args for [A-Za-z0-9_]+: want \d+ got \d+$`,
	`^index of (untyped nil|nil pointer)$`,
	`^can't call method/function "[A-Za-z0-9_]+" with \d+ results$`,
	`^[A-Za-z0-9_]+ is not a method but has arguments$`,
	`^[A-Za-z0-9_]+ has arguments but cannot be invoked as function$`,
	`^[A-Za-z0-9_]+ is an unexported field of struct type [^\n]+$`,
	`^nil is not a command$`,
	`^cannot assign nil to [^\n]+$`,
	`^exceeded maximum template depth \(\d+\)$`,
)

// safeCall are functions' errors that name only types and positions given
// by the template.
var safeCall = lazyREs(
	`^incompatible types for comparison: [^\n]+$`,
	`^invalid type for comparison$`,
	`^missing argument for comparison$`,
	`^can't index item of type [^\n]+$`,
	`^cannot index slice/array with (nil|type [^\n]+)$`,
	`^function "[A-Za-z0-9_]+" is not available in mariposa templates: [^\n]+$`,
)

// lazyRE compiles expr on its first use: these read error messages only,
// and compiled at start they held 0.3 MB of every idle mariposa's heap.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// lazyREs is lazyRE for a list.
func lazyREs(exprs ...string) func() []*regexp.Regexp {
	return sync.OnceValue(func() []*regexp.Regexp {
		res := make([]*regexp.Regexp, len(exprs))
		for i, e := range exprs {
			res[i] = regexp.MustCompile(e)
		}
		return res
	})
}

var (
	strconvRE = lazyRE(`(?s)^(strconv\.[A-Za-z0-9]+): parsing .*: (invalid syntax|value out of range)$`)
	regexpRE  = lazyRE("(?s)^error parsing regexp: ([^:`]+): `")
	fileRE    = lazyRE(`(?s)^file ".*": (outside the service directory [^\n]*|not a regular file|larger than the [^\n]+ limit|no such file or directory|permission denied|is a directory)$`)
)

// execMessage rewrites an error of a template's execution for people:
// "LABEL:LINE:COL: at <ACTION>: WHAT", with no data read from Consul.
func execMessage(label string, err error) string {
	m := execErrRE().FindStringSubmatch(err.Error())
	if m == nil {
		return "rendering failed " + withheld
	}
	line, col, action, msg := m[1], m[2], m[3], m[4]
	return fmt.Sprintf("%s:%s:%s: at <%s>: %s", label, line, col, action, execWhat(msg))
}

// execWhat says what went wrong in an execution error's message.
func execWhat(msg string) string {
	if c := callRE().FindStringSubmatch(msg); c != nil {
		return "error calling " + c[1] + ": " + callWhat(c[1], c[2])
	}
	if strings.HasPrefix(msg, "range can't iterate over ") {
		return "range can't iterate over the value (not shown: it may be data read from Consul)"
	}
	for _, re := range safeExec() {
		if re.MatchString(msg) {
			return msg
		}
	}
	return "failed " + withheld
}

// callWhat says what went wrong in function fn's error msg.
func callWhat(fn, msg string) string {
	// consul-template prefixes most of its functions' errors with their name.
	msg = strings.TrimPrefix(msg, fn+": ")
	for _, re := range safeCall() {
		if re.MatchString(msg) {
			return msg
		}
	}
	switch {
	case strconvRE().MatchString(msg):
		s := strconvRE().FindStringSubmatch(msg)
		return s[1] + ": " + s[2] + " (the value is not shown)"
	case strings.HasPrefix(msg, "invalid character "), strings.HasPrefix(msg, "unexpected end of JSON input"),
		strings.HasPrefix(msg, "json: "):
		return "not valid JSON (the value is not shown)"
	case strings.HasPrefix(msg, "yaml: "):
		return "not valid YAML (the value is not shown)"
	case strings.Contains(msg, "illegal base64 data"):
		return "not valid base64 (the value is not shown)"
	case strings.HasPrefix(msg, "index out of range: "):
		return "index out of range"
	case strings.HasPrefix(msg, "required environment variable ") && strings.HasSuffix(msg, " is empty"):
		return "a required environment variable is empty"
	case regexpRE().MatchString(msg):
		return "error parsing regexp: " + regexpRE().FindStringSubmatch(msg)[1]
	case fileRE().MatchString(msg):
		return fileRE().FindStringSubmatch(msg)[1]
	}
	return "failed " + withheld
}

// envLineError says why line n of an env template's output is no
// KEY=VALUE pair, without the line: it holds what the template wrote.
func envLineError(n int, hasEq bool) error {
	if !hasEq {
		return fmt.Errorf(`env line %d is not KEY=VALUE: it has no "=" (the line is not shown)`, n)
	}
	return fmt.Errorf(`env line %d is not KEY=VALUE: the name before "=" is not a valid variable name (the line is not shown)`, n)
}

// kvValues are the values of Consul's keys among ds that brain holds: what
// a name that must not be shown could be made of.
func kvValues(brain interface {
	Recall(dep.Dependency) (any, bool)
}, ds []dep.Dependency) []string {
	var vals []string
	for _, d := range ds {
		data, ok := brain.Recall(d)
		if !ok {
			continue
		}
		switch v := data.(type) {
		case string:
			vals = append(vals, v)
		case []*dep.KeyPair:
			for _, p := range v {
				vals = append(vals, p.Value)
			}
		}
	}
	return vals
}

// namedByData says whether name (a key, prefix or service a template
// asks for) holds one of vals, and which: a template that computes the name
// from a value must not show it in a waiting message, nor the log the
// query's name.
func namedByData(name string, vals []string) (bool, string) {
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if name == v || len(v) >= 4 && strings.Contains(name, v) {
			return true, v
		}
	}
	return false, ""
}

// hidden are values read from Consul that name queries (a key named by a
// value): the log shows them as "[data not shown]" wherever they appear in
// a query's name or URL. Counted by the queries that use them.
var hidden = struct {
	sync.RWMutex
	vals map[string]int
}{vals: map[string]int{}}

func hideValue(v string) {
	hidden.Lock()
	hidden.vals[v]++
	hidden.Unlock()
}

func unhideValue(v string) {
	hidden.Lock()
	if hidden.vals[v]--; hidden.vals[v] <= 0 {
		delete(hidden.vals, v)
	}
	hidden.Unlock()
}

// redactNames replaces the hidden values in s (a query's name, a log line).
func redactNames(s string) string {
	hidden.RLock()
	defer hidden.RUnlock()
	for v := range hidden.vals {
		s = strings.ReplaceAll(s, v, "[data not shown]")
		if esc := (&url.URL{Path: v}).EscapedPath(); esc != v {
			s = strings.ReplaceAll(s, esc, "[data not shown]")
		}
	}
	return s
}

// redactStdLine rewrites one line of consul-template's log (the standard
// logger's): the value a query returned becomes its size, and every other
// quoted string too. Its dependency names (kv.block(app/secret)), URLs and
// counts stay, but for the values that name queries (redactNames).
func redactStdLine(line string) string {
	line = redactNames(line)
	var b strings.Builder
	for {
		i := strings.IndexByte(line, '"')
		if i < 0 {
			b.WriteString(line)
			break
		}
		b.WriteString(line[:i])
		q, err := strconv.QuotedPrefix(line[i:])
		if err != nil {
			// Not a Go-quoted string: what follows is not shown.
			b.WriteString("[rest not shown]")
			if strings.HasSuffix(line, "\n") {
				b.WriteByte('\n')
			}
			break
		}
		s, _ := strconv.Unquote(q)
		if strings.HasSuffix(b.String(), "returned ") {
			fmt.Fprintf(&b, "a value of %d bytes", len(s))
		} else {
			fmt.Fprintf(&b, "[%d bytes not shown]", len(s))
		}
		line = line[i+len(q):]
	}
	return b.String()
}
