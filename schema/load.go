package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// LoadOptions are the inputs of a load besides the files themselves.
type LoadOptions struct {
	// Vars are the -var NAME=VALUE flags, values as raw strings.
	Vars map[string]string
	// Environ is used for MARIPOSA_VAR_NAME and env(); nil means os.Environ().
	Environ []string
	// CheckTemplate, when set, parses each template's text (inline
	// contents, or the source file) and returns nil or its first problem,
	// preferably a *TemplateError for a precise position. mariposa passes
	// render.CheckTemplate: the renderer's function map lives there, and
	// schema imports no runtime package.
	CheckTemplate func(text string) error
	// CheckHost adds warnings about this machine: a service's program that
	// cannot be found or is not executable, a dir that does not exist. Only
	// warnings: files may be validated elsewhere than where they run.
	CheckHost bool
	// Users, when set, checks each service's user and group on this
	// machine (schema imports no runtime package: mariposa passes
	// internal/users').
	Users *UserCheck
}

// UserCheck checks users and groups against this machine.
type UserCheck struct {
	// CanSwitch says why this process cannot run children as other users.
	CanSwitch func() error
	// Resolve says why a user and group cannot be found.
	Resolve func(user, group string) error
	// Strict: errors (mariposa run) instead of warnings (validate).
	Strict bool
}

// source is one file to load. name is how the file is shown in diagnostics
// (the path as the user gave it), abs its absolute path.
type source struct {
	name string
	abs  string
	data []byte
}

// Load reads files and directories (a directory means every *.hcl in it,
// sorted by name), decodes them, applies defaults and validates the whole
// configuration. The Config is nil whenever the diagnostics hold an error;
// the diagnostics are never nil.
func Load(paths []string, opts LoadOptions) (*Config, *Diagnostics) {
	srcs, diags := readPaths(paths)
	if diags.HasErrors() {
		return nil, &Diagnostics{diags: diags, files: map[string]*hcl.File{}}
	}
	cfg, d := loadSafe(srcs, opts)
	d.diags = append(diags, d.diags...)
	return cfg, d
}

// loadSafe turns a decoder panic into an error: a bad file must never take
// the supervisor down. Tests and the fuzzer call load directly to see panics.
func loadSafe(srcs []source, opts LoadOptions) (cfg *Config, d *Diagnostics) {
	defer func() {
		if r := recover(); r != nil {
			cfg = nil
			d = &Diagnostics{files: map[string]*hcl.File{}, diags: hcl.Diagnostics{{
				Severity: hcl.DiagError,
				Summary:  "Internal error",
				Detail:   fmt.Sprintf("mariposa failed while loading the configuration; please report this as a bug: %v\n%s", r, debug.Stack()),
			}}}
		}
	}()
	return load(srcs, opts)
}

func readPaths(paths []string) ([]source, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	fail := func(summary, format string, args ...any) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(format, args...)})
	}
	if len(paths) == 0 {
		fail("No service files", "Give at least one .hcl file or a directory of them.")
		return nil, diags
	}
	var srcs []source
	seen := map[string]bool{}
	add := func(name string) {
		abs, err := filepath.Abs(name)
		if err != nil {
			fail("Cannot read file", "Cannot resolve %s: %v.", name, err)
			return
		}
		if seen[abs] {
			return
		}
		seen[abs] = true
		data, err := os.ReadFile(name)
		if err != nil {
			fail("Cannot read file", "%v.", err)
			return
		}
		srcs = append(srcs, source{name: name, abs: abs, data: data})
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			fail("Cannot read file", "%v.", err)
			continue
		}
		if !fi.IsDir() {
			add(p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			fail("Cannot read directory", "%v.", err)
			continue
		}
		var names []string
		for _, ent := range entries {
			if !strings.HasSuffix(ent.Name(), ".hcl") || strings.HasPrefix(ent.Name(), ".") {
				continue
			}
			full := filepath.Join(p, ent.Name())
			if st, err := os.Stat(full); err == nil && st.IsDir() {
				continue
			}
			names = append(names, full)
		}
		if len(names) == 0 {
			fail("No service files", "The directory %s has no *.hcl files.", p)
			continue
		}
		sort.Strings(names)
		for _, n := range names {
			add(n)
		}
	}
	return srcs, diags
}

// parseFile parses one source in HCL native syntax.
func parseFile(src source) (*hcl.File, hcl.Diagnostics) {
	return parseHCL(src.data, src.name)
}
