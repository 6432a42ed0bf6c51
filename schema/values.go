package schema

import (
	"fmt"
	"math/big"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// evaluator evaluates attribute expressions of one file and collects every
// diagnostic on the way, so decoding keeps going and reports all problems.
type evaluator struct {
	ctx      *hcl.EvalContext
	varNames []string // declared variables, for did-you-mean
	declared map[string]bool
	diags    hcl.Diagnostics
}

func (e *evaluator) errorf(subject hcl.Range, summary, format string, args ...any) {
	e.diags = append(e.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  subject.Ptr(),
	})
}

// value evaluates attr. ok is false when the attribute is null (treated as
// unset) or when evaluation failed (already reported).
func (e *evaluator) value(attr *hcl.Attribute) (cty.Value, bool) {
	bad := false
	for _, tr := range attr.Expr.Variables() {
		if tr.RootName() != "var" || len(tr) < 2 {
			continue
		}
		step, ok := tr[1].(hcl.TraverseAttr)
		if !ok || e.declared[step.Name] {
			continue
		}
		e.errorf(tr.SourceRange(), "Undeclared variable",
			"There is no variable named %q; declare it with a variable %q block.%s", step.Name, step.Name, didYouMean(step.Name, e.varNames))
		bad = true
	}
	if bad {
		return cty.NilVal, false
	}
	v, diags := attr.Expr.Value(e.ctx)
	e.diags = append(e.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		// Only a variable that failed to resolve is unknown; that failure
		// is reported already.
		return cty.NilVal, false
	}
	if v.IsNull() {
		return cty.NilVal, false
	}
	return v, true
}

func (e *evaluator) typeError(attr *hcl.Attribute, what string, hint string) {
	e.errorf(attr.Expr.Range(), "Incorrect attribute value type",
		"Inappropriate value for attribute %q: %s required.%s", attr.Name, what, hint)
}

// String decodes a string attribute; numbers and bools convert as HCL does.
func (e *evaluator) String(attr *hcl.Attribute) (string, bool) {
	v, ok := e.value(attr)
	if !ok {
		return "", false
	}
	if !v.Type().IsPrimitiveType() {
		e.typeError(attr, "string", "")
		return "", false
	}
	sv, err := convert.Convert(v, cty.String)
	if err != nil || sv.IsNull() {
		e.typeError(attr, "string", "")
		return "", false
	}
	return sv.AsString(), true
}

// Bool decodes a bool attribute.
func (e *evaluator) Bool(attr *hcl.Attribute) (bool, bool) {
	v, ok := e.value(attr)
	if !ok {
		return false, false
	}
	bv, err := convert.Convert(v, cty.Bool)
	if err != nil || bv.IsNull() {
		e.typeError(attr, "bool", "")
		return false, false
	}
	return bv.True(), true
}

// Int decodes a whole number in [min, max].
func (e *evaluator) Int(attr *hcl.Attribute, min, max int64) (int, bool) {
	v, ok := e.value(attr)
	if !ok {
		return 0, false
	}
	nv, err := convert.Convert(v, cty.Number)
	if err != nil || nv.IsNull() {
		e.typeError(attr, "number", "")
		return 0, false
	}
	bf := nv.AsBigFloat()
	if !bf.IsInt() {
		e.errorf(attr.Expr.Range(), "Invalid number", "%q must be a whole number, got %s.", attr.Name, bf.Text('g', 10))
		return 0, false
	}
	n, acc := bf.Int64()
	if acc != big.Exact || n < min || n > max {
		e.errorf(attr.Expr.Range(), "Value out of range", "%q must be between %d and %d, got %s.", attr.Name, min, max, bf.Text('g', 20))
		return 0, false
	}
	return int(n), true
}

// StringList decodes a list of strings.
func (e *evaluator) StringList(attr *hcl.Attribute, hint string) ([]string, bool) {
	v, ok := e.value(attr)
	if !ok {
		return nil, false
	}
	ty := v.Type()
	if !ty.IsListType() && !ty.IsTupleType() && !ty.IsSetType() {
		e.typeError(attr, "list of strings", hint)
		return nil, false
	}
	lv, err := convert.Convert(v, cty.List(cty.String))
	if err != nil {
		e.typeError(attr, "list of strings", hint)
		return nil, false
	}
	out := make([]string, 0, lv.LengthInt())
	for it := lv.ElementIterator(); it.Next(); {
		_, ev := it.Element()
		if ev.IsNull() {
			e.errorf(attr.Expr.Range(), "Invalid list element", "Elements of %q must not be null.", attr.Name)
			return nil, false
		}
		out = append(out, ev.AsString())
	}
	return out, true
}

// Argv decodes a command line: a non-empty list of strings whose first
// element (the program) is not empty, without NUL bytes, which exec cannot
// pass. what says whose command it is, for the "Empty command" detail.
func (e *evaluator) Argv(attr *hcl.Attribute, what string) ([]string, bool) {
	argv, ok := e.StringList(attr, commandHint)
	if !ok {
		return nil, false
	}
	if len(argv) == 0 || argv[0] == "" {
		e.errorf(attr.Expr.Range(), "Empty command", "%s%s", what, commandHint)
		return nil, false
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			e.errorf(attr.Expr.Range(), "Invalid command", "Argument %q contains a NUL byte, which no process can receive.", a)
			return nil, false
		}
	}
	return argv, true
}

// StringMap decodes a map (or object) of strings.
func (e *evaluator) StringMap(attr *hcl.Attribute) (map[string]string, bool) {
	v, ok := e.value(attr)
	if !ok {
		return nil, false
	}
	ty := v.Type()
	if !ty.IsMapType() && !ty.IsObjectType() {
		e.typeError(attr, "map of strings", "")
		return nil, false
	}
	mv, err := convert.Convert(v, cty.Map(cty.String))
	if err != nil {
		e.typeError(attr, "map of strings", "")
		return nil, false
	}
	out := make(map[string]string, mv.LengthInt())
	for it := mv.ElementIterator(); it.Next(); {
		k, ev := it.Element()
		if ev.IsNull() {
			e.errorf(attr.Expr.Range(), "Invalid map element", "The value of %q in %q must not be null.", k.AsString(), attr.Name)
			return nil, false
		}
		out[k.AsString()] = ev.AsString()
	}
	return out, true
}

// Duration decodes a Go duration string such as "10s".
func (e *evaluator) Duration(attr *hcl.Attribute) (time.Duration, bool) {
	v, ok := e.value(attr)
	if !ok {
		return 0, false
	}
	return e.durationValue(attr.Name, attr.Expr.Range(), v)
}

func (e *evaluator) durationValue(name string, rng hcl.Range, v cty.Value) (time.Duration, bool) {
	switch {
	case v.Type() == cty.Number:
		e.errorf(rng, "Invalid duration",
			`%q is a duration string with a unit, such as "10s", "500ms" or "5m"; a bare number is ambiguous. Write "%ss" for seconds.`,
			name, v.AsBigFloat().Text('g', 10))
		return 0, false
	case v.Type() != cty.String:
		e.errorf(rng, "Invalid duration", `%q must be a duration string such as "10s".`, name)
		return 0, false
	}
	d, err := ParseDuration(v.AsString())
	if err != nil {
		e.errorf(rng, "Invalid duration", "Invalid %s: %s.", name, err)
		return 0, false
	}
	return d, true
}

// Signal decodes a signal name.
func (e *evaluator) Signal(attr *hcl.Attribute) (syscall.Signal, bool) {
	v, ok := e.value(attr)
	if !ok {
		return 0, false
	}
	if v.Type() != cty.String {
		e.errorf(attr.Expr.Range(), "Unknown signal", `%q must be a signal name such as "SIGTERM" or "HUP".`, attr.Name)
		return 0, false
	}
	sig, err := ParseSignal(v.AsString())
	if err != nil {
		e.errorf(attr.Expr.Range(), "Unknown signal", "%s", err)
		return 0, false
	}
	return sig, true
}

// Perms decodes file permissions given as an octal string.
func (e *evaluator) Perms(attr *hcl.Attribute) (os.FileMode, bool) {
	v, ok := e.value(attr)
	if !ok {
		return 0, false
	}
	if v.Type() != cty.String {
		e.errorf(attr.Expr.Range(), "Invalid perms",
			`%q is an octal string such as "0640": a bare number like 0640 is read as decimal by HCL.`, attr.Name)
		return 0, false
	}
	p, err := ParsePerms(v.AsString())
	if err != nil {
		e.errorf(attr.Expr.Range(), "Invalid perms", "%s.", err)
		return 0, false
	}
	return p, true
}

// Enum decodes a string that must be one of valid; summary names the setting.
func (e *evaluator) Enum(attr *hcl.Attribute, summary string, valid []string) (string, bool) {
	s, ok := e.String(attr)
	if !ok {
		return "", false
	}
	for _, v := range valid {
		if s == v {
			return s, true
		}
	}
	e.errorf(attr.Expr.Range(), summary, "%q is not valid for %q; use %s.%s", s, attr.Name, quotedList(valid), didYouMean(s, valid))
	return "", false
}
