package schema

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// envVarPrefix names the environment variables that set variables.
const envVarPrefix = "MARIPOSA_VAR_"

// variable is one decoded `variable` block.
type variable struct {
	name        string
	declRange   hcl.Range
	typ         cty.Type // cty.DynamicPseudoType when no type is given
	hasType     bool
	def         cty.Value // cty.NilVal when there is no default
	description string
	// broken is set when the default failed to decode (already reported), so
	// a missing value is not reported a second time.
	broken bool
}

func (l *loader) decodeVariable(block *hcl.Block, src *parsed) *variable {
	v := &variable{name: block.Labels[0], declRange: block.DefRange, typ: cty.DynamicPseudoType}
	if !hclsyntax.ValidIdentifier(v.name) {
		l.errorf(block.LabelRanges[0], "Invalid variable name",
			"%q is not a valid variable name: use letters, digits, underscores and dashes, starting with a letter.", v.name)
		return nil
	}
	content, diags := bodyContent(block.Body, variableSchema)
	l.diags = append(l.diags, diags...)
	e := l.evaluatorFor(src, nil)
	if attr, ok := content.Attributes["description"]; ok {
		v.description, _ = e.String(attr)
	}
	if attr, ok := content.Attributes["type"]; ok {
		ty, tdiags := typeexpr.TypeConstraint(attr.Expr)
		l.diags = append(l.diags, tdiags...)
		if !tdiags.HasErrors() {
			v.typ, v.hasType = ty, true
		}
	}
	if attr, ok := content.Attributes["default"]; ok {
		if refs := attr.Expr.Variables(); len(refs) > 0 {
			l.errorf(refs[0].SourceRange(), "Variables not allowed",
				"The default of variable %q must be a constant value; it can use functions such as env() but no references.", v.name)
			v.broken = true
		} else if val, ok := e.value(attr); !ok {
			v.broken = len(e.diags) > 0
		} else {
			cv, err := convert.Convert(val, v.typ)
			if err != nil {
				l.errorf(attr.Expr.Range(), "Invalid default value",
					"The default of variable %q does not match its type %s: %s.", v.name, typeexpr.TypeString(v.typ), err)
				v.broken = true
			} else {
				v.def = cv
			}
		}
	}
	l.diags = append(l.diags, e.diags...)
	return v
}

// resolveVariables gives every declared variable its value: -var first, then
// MARIPOSA_VAR_<name>, then the default.
func (l *loader) resolveVariables(opts LoadOptions) {
	names := make([]string, 0, len(l.vars))
	for _, v := range l.vars {
		names = append(names, v.name)
	}
	for _, name := range sortedKeys(opts.Vars) {
		if _, ok := l.varByName[name]; !ok {
			l.diags = append(l.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Undeclared variable",
				Detail: fmt.Sprintf("A value was given with -var for %q, but no variable %q is declared.%s",
					name, name, didYouMean(name, names)),
			})
		}
	}
	vals := map[string]cty.Value{}
	for _, v := range l.vars {
		if raw, ok := opts.Vars[v.name]; ok {
			if val, ok := l.parseRawVar(v, raw, "-var "+v.name); ok {
				vals[v.name] = val
			}
			continue
		}
		if raw, ok := lookupEnvOK(l.environ, envVarPrefix+v.name); ok {
			if val, ok := l.parseRawVar(v, raw, "environment variable "+envVarPrefix+v.name); ok {
				vals[v.name] = val
			}
			continue
		}
		if v.def != cty.NilVal {
			vals[v.name] = v.def
			continue
		}
		if v.broken {
			continue
		}
		l.errorf(v.declRange, "Missing variable value",
			"Variable %q has no default; set it with -var %s=VALUE or the %s%s environment variable.",
			v.name, v.name, envVarPrefix, v.name)
	}
	// Variables that failed still get a value so their uses do not cascade
	// into more errors.
	for _, v := range l.vars {
		if _, ok := vals[v.name]; !ok {
			vals[v.name] = cty.DynamicVal
		}
	}
	l.varValues = vals
}

// parseRawVar turns a raw string into a value of v's type: strings are taken
// as is, anything else is parsed as an HCL expression (like Terraform).
func (l *loader) parseRawVar(v *variable, raw, from string) (cty.Value, bool) {
	if !v.hasType || v.typ.IsPrimitiveType() || v.typ == cty.DynamicPseudoType {
		val, err := convert.Convert(cty.StringVal(raw), v.typ)
		if err != nil {
			l.diags = append(l.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid variable value",
				Detail:   fmt.Sprintf("The value %q of %s does not match the variable's type %s: %s.", raw, from, typeexpr.TypeString(v.typ), err),
			})
			return cty.NilVal, false
		}
		return val, true
	}
	diags := checkNesting([]byte(raw), from)
	var expr hclsyntax.Expression
	if !diags.HasErrors() {
		expr, diags = hclsyntax.ParseExpression([]byte(raw), from, hcl.InitialPos)
	}
	if !diags.HasErrors() {
		var val cty.Value
		val, diags = expr.Value(nil)
		if !diags.HasErrors() {
			cv, err := convert.Convert(val, v.typ)
			if err == nil {
				return cv, true
			}
			diags = hcl.Diagnostics{{Detail: err.Error()}}
		}
	}
	l.diags = append(l.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid variable value",
		Detail: fmt.Sprintf("The value of %s must be an HCL expression of type %s: %s",
			from, typeexpr.TypeString(v.typ), firstDetail(diags)),
	})
	return cty.NilVal, false
}

// firstDetail describes the first diagnostic: its detail, else its summary.
func firstDetail(diags hcl.Diagnostics) string {
	if len(diags) == 0 {
		return ""
	}
	if d := diags[0]; d.Detail != "" {
		return d.Detail
	}
	return diags[0].Summary
}

// lookupEnvOK is lookupEnv that also says whether the variable is set.
func lookupEnvOK(environ []string, name string) (string, bool) {
	val, found := "", false
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val, found = v, true
		}
	}
	return val, found
}
