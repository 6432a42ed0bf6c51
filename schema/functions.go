package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// maxFileSize bounds file(): configuration snippets, not data sets.
const maxFileSize = 4 << 20

// stdFunctions are the cty standard functions under the names Terraform and
// Nomad users know.
func stdFunctions() map[string]function.Function {
	return map[string]function.Function{
		"abs":             stdlib.AbsoluteFunc,
		"can":             tryfunc.CanFunc,
		"ceil":            stdlib.CeilFunc,
		"chomp":           stdlib.ChompFunc,
		"chunklist":       stdlib.ChunklistFunc,
		"coalesce":        coalesceFunc,
		"coalescelist":    stdlib.CoalesceListFunc,
		"compact":         stdlib.CompactFunc,
		"concat":          stdlib.ConcatFunc,
		"contains":        stdlib.ContainsFunc,
		"csvdecode":       stdlib.CSVDecodeFunc,
		"distinct":        stdlib.DistinctFunc,
		"element":         stdlib.ElementFunc,
		"flatten":         stdlib.FlattenFunc,
		"floor":           stdlib.FloorFunc,
		"format":          stdlib.FormatFunc,
		"formatdate":      stdlib.FormatDateFunc,
		"formatlist":      stdlib.FormatListFunc,
		"indent":          stdlib.IndentFunc,
		"index":           stdlib.IndexFunc,
		"join":            stdlib.JoinFunc,
		"jsondecode":      stdlib.JSONDecodeFunc,
		"jsonencode":      stdlib.JSONEncodeFunc,
		"keys":            stdlib.KeysFunc,
		"length":          lengthFunc,
		"log":             stdlib.LogFunc,
		"lookup":          stdlib.LookupFunc,
		"lower":           stdlib.LowerFunc,
		"max":             stdlib.MaxFunc,
		"merge":           stdlib.MergeFunc,
		"min":             stdlib.MinFunc,
		"parseint":        stdlib.ParseIntFunc,
		"pow":             stdlib.PowFunc,
		"range":           stdlib.RangeFunc,
		"regex":           stdlib.RegexFunc,
		"regexall":        stdlib.RegexAllFunc,
		"regex_replace":   stdlib.RegexReplaceFunc,
		"replace":         stdlib.ReplaceFunc,
		"reverse":         stdlib.ReverseListFunc,
		"setintersection": stdlib.SetIntersectionFunc,
		"setproduct":      stdlib.SetProductFunc,
		"setsubtract":     stdlib.SetSubtractFunc,
		"setunion":        stdlib.SetUnionFunc,
		"signum":          stdlib.SignumFunc,
		"slice":           stdlib.SliceFunc,
		"sort":            stdlib.SortFunc,
		"split":           stdlib.SplitFunc,
		"strlen":          stdlib.StrlenFunc,
		"strrev":          stdlib.ReverseFunc,
		"substr":          stdlib.SubstrFunc,
		"timeadd":         stdlib.TimeAddFunc,
		"title":           stdlib.TitleFunc,
		"tobool":          stdlib.MakeToFunc(cty.Bool),
		"tolist":          stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)),
		"tomap":           stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
		"tonumber":        stdlib.MakeToFunc(cty.Number),
		"toset":           stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)),
		"tostring":        stdlib.MakeToFunc(cty.String),
		"trim":            stdlib.TrimFunc,
		"trimprefix":      stdlib.TrimPrefixFunc,
		"trimspace":       stdlib.TrimSpaceFunc,
		"trimsuffix":      stdlib.TrimSuffixFunc,
		"try":             tryfunc.TryFunc,
		"upper":           stdlib.UpperFunc,
		"values":          stdlib.ValuesFunc,
		"zipmap":          stdlib.ZipmapFunc,
	}
}

// lengthFunc is Terraform's length: of a string (in characters) as well as
// of a collection, which cty's LengthFunc alone does not cover.
var lengthFunc = function.New(&function.Spec{
	Description: "Returns the number of elements of a collection or characters of a string.",
	Params: []function.Parameter{{
		Name:             "value",
		Type:             cty.DynamicPseudoType,
		AllowDynamicType: true,
		AllowUnknown:     true,
		AllowMarked:      true,
	}},
	Type: func(args []cty.Value) (cty.Type, error) {
		ty := args[0].Type()
		if ty == cty.String || ty == cty.DynamicPseudoType || ty.IsCollectionType() || ty.IsTupleType() || ty.IsObjectType() {
			return cty.Number, nil
		}
		return cty.NilType, fmt.Errorf("argument must be a string, a collection or a structural type")
	},
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		v := args[0]
		if v.Type() == cty.String {
			return stdlib.Strlen(v)
		}
		if v.Type().IsObjectType() {
			if !v.IsKnown() {
				return cty.UnknownVal(cty.Number), nil
			}
			return cty.NumberIntVal(int64(len(v.Type().AttributeTypes()))), nil
		}
		if v.Type() == cty.DynamicPseudoType {
			return cty.UnknownVal(cty.Number), nil
		}
		return stdlib.Length(v)
	},
})

// coalesceFunc is Terraform's coalesce: the first argument that is neither
// null nor an empty string (cty's own only skips nulls).
var coalesceFunc = function.New(&function.Spec{
	Description: "Returns the first argument that is not null and not an empty string.",
	VarParam: &function.Parameter{
		Name:             "vals",
		Type:             cty.DynamicPseudoType,
		AllowUnknown:     true,
		AllowDynamicType: true,
		AllowNull:        true,
	},
	Type: func(args []cty.Value) (cty.Type, error) {
		return stdlib.CoalesceFunc.ReturnTypeForValues(args)
	},
	Impl: func(args []cty.Value, retType cty.Type) (cty.Value, error) {
		for _, arg := range args {
			if !arg.IsKnown() {
				return cty.UnknownVal(retType), nil
			}
			v, err := convert.Convert(arg, retType)
			if err != nil {
				return cty.NilVal, err
			}
			if v.IsNull() || (v.Type() == cty.String && v.AsString() == "") {
				continue
			}
			return v, nil
		}
		return cty.NilVal, fmt.Errorf("no non-null, non-empty-string arguments")
	},
})

// fileFunctions returns the full function table for expressions of a file in
// dir: the standard set plus env() over environ and file() confined to dir.
func fileFunctions(dir string, environ []string) map[string]function.Function {
	fns := stdFunctions()
	fns["env"] = envFunc(environ)
	fns["file"] = fileFunc(dir)
	return fns
}

// envFunc reads from the given environment; a missing variable is "".
func envFunc(environ []string) function.Function {
	return function.New(&function.Spec{
		Description: "Returns the value of an environment variable, or an empty string if it is not set.",
		Params:      []function.Parameter{{Name: "name", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.StringVal(lookupEnv(environ, args[0].AsString())), nil
		},
	})
}

// lookupEnv returns the last value of name in environ, like os.Getenv does
// for duplicated entries on Linux.
func lookupEnv(environ []string, name string) string {
	val := ""
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val = v
		}
	}
	return val
}

// fileFunc reads a UTF-8 file relative to dir and refuses anything that
// resolves (through "..", an absolute path or a symlink) outside dir.
func fileFunc(dir string) function.Function {
	return function.New(&function.Spec{
		Description: "Reads a file relative to the declaring file's directory.",
		Params:      []function.Parameter{{Name: "path", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			s, err := readConfined(dir, args[0].AsString())
			if err != nil {
				return cty.NilVal, err
			}
			return cty.StringVal(s), nil
		},
	})
}

func readConfined(dir, name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("the path is empty")
	}
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("the path contains a NUL byte")
	}
	if filepath.IsAbs(name) {
		return "", fmt.Errorf("%q is absolute; file() only reads paths relative to %s", name, dir)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("cannot resolve %s: %v", dir, err)
	}
	if !within(root, filepath.Join(root, name)) {
		return "", fmt.Errorf("%q is outside %s; file() only reads files in the directory of the declaring file", name, dir)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, name))
	if err != nil {
		if os.IsNotExist(err) {
			return "", fmt.Errorf("no file %q in %s", name, dir)
		}
		return "", fmt.Errorf("cannot read %q: %v", name, err)
	}
	if !within(root, real) {
		return "", fmt.Errorf("%q resolves through a symlink to %s, outside %s; file() only reads files in the directory of the declaring file", name, real, dir)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("cannot read %q: %v", name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%q is not a regular file", name)
	}
	if fi.Size() > maxFileSize {
		return "", fmt.Errorf("%q is larger than %d bytes", name, maxFileSize)
	}
	b, err := os.ReadFile(real)
	if err != nil {
		return "", fmt.Errorf("cannot read %q: %v", name, err)
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%q is not valid UTF-8 text", name)
	}
	return string(b), nil
}

// within reports whether path is root or below it (both cleaned, absolute).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
