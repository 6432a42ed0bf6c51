package render

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"text/template/parse"
)

// removed are consul-template functions that do not exist in mariposa
// templates: they run programs, write files or parse data as templates
// (plugin, writeToFile, executeTemplate), or need Vault or Nomad, which
// mariposa does not talk to.
var removed = map[string]string{
	"plugin":           "it would run a program",
	"writeToFile":      "it would write files outside the destination",
	"executeTemplate":  "it would run data as a template",
	"secret":           "mariposa templates read Consul only (no Vault)",
	"secrets":          "mariposa templates read Consul only (no Vault)",
	"pkiCert":          "mariposa templates read Consul only (no Vault)",
	"nomadService":     "mariposa templates read Consul only (no Nomad)",
	"nomadServices":    "mariposa templates read Consul only (no Nomad)",
	"nomadVar":         "mariposa templates read Consul only (no Nomad)",
	"nomadVarExists":   "mariposa templates read Consul only (no Nomad)",
	"nomadVarList":     "mariposa templates read Consul only (no Nomad)",
	"nomadVarListSafe": "mariposa templates read Consul only (no Nomad)",
}

func removedErr(name string) error {
	return fmt.Errorf("function %q is not available in mariposa templates: %s", name, removed[name])
}

// walk visits every node of a template tree, in branches not taken too.
func walk(n parse.Node, f func(parse.Node)) {
	if n == nil {
		return
	}
	f(n)
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walk(c, f)
		}
	case *parse.ActionNode:
		walk(n.Pipe, f)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walk(c, f)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walk(a, f)
		}
	case *parse.IfNode:
		walkBranch(&n.BranchNode, f)
	case *parse.RangeNode:
		walkBranch(&n.BranchNode, f)
	case *parse.WithNode:
		walkBranch(&n.BranchNode, f)
	case *parse.TemplateNode:
		walk(n.Pipe, f)
	case *parse.ChainNode:
		walk(n.Node, f)
	}
}

func walkBranch(b *parse.BranchNode, f func(parse.Node)) {
	walk(b.Pipe, f)
	if b.List != nil {
		walk(b.List, f)
	}
	if b.ElseList != nil {
		walk(b.ElseList, f)
	}
}

// sandbox holds what a template may read besides Consul: files under root
// and an environment.
type sandbox struct {
	root    string // the service's directory
	env     map[string]string
	maxFile int
}

// sandboxFuncs are consul-template's functions replaced or removed here.
func (s *sandbox) funcs() template.FuncMap {
	fm := template.FuncMap{
		"file":         s.readFile,
		"env":          s.getenv,
		"mustEnv":      s.mustEnv,
		"envOrDefault": s.envOrDefault,
	}
	for name := range removed {
		name := name
		fm[name] = func(...any) (string, error) { return "", removedErr(name) }
	}
	return fm
}

// readFile reads a regular file inside root. os.Root confines every path
// component, so neither "..", an absolute path nor a symlink leads out, and
// nothing can swap a component between the check and the open.
func (s *sandbox) readFile(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	rel := p
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(s.root, filepath.Clean(p))
		if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("file %q: outside the service directory %s", p, s.root)
		}
		rel = r
	}
	root, err := os.OpenRoot(s.root)
	if err != nil {
		return "", fmt.Errorf("file %q: %w", p, err)
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		if strings.Contains(err.Error(), "escapes") || s.resolvesOutside(rel) {
			return "", fmt.Errorf("file %q: outside the service directory %s", p, s.root)
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("file %q: %w", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("file %q: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("file %q: not a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(s.maxFile)+1))
	if err != nil {
		return "", fmt.Errorf("file %q: %w", p, err)
	}
	if len(b) > s.maxFile {
		return "", fmt.Errorf("file %q: larger than the %s limit", p, size(s.maxFile))
	}
	return string(b), nil
}

// resolvesOutside tells, for a clearer message only, whether rel leads out of
// root once symlinks are followed (os.Root already refused it).
func (s *sandbox) resolvesOutside(rel string) bool {
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return true
	}
	root, err := filepath.EvalSymlinks(s.root)
	if err != nil {
		return false
	}
	// Resolve the longest existing prefix: a dangling link still names
	// where it points.
	p := filepath.Join(s.root, clean)
	for ; p != s.root && p != filepath.Dir(p); p = filepath.Dir(p) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			r, err := filepath.Rel(root, real)
			return err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator))
		}
		if target, err := os.Readlink(p); err == nil {
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			r, err := filepath.Rel(s.root, filepath.Clean(target))
			return err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator))
		}
	}
	return false
}

func (s *sandbox) lookup(k string) (string, bool) {
	if v, ok := s.env[k]; ok {
		return v, true
	}
	if hiddenEnv[k] {
		return "", false
	}
	return os.LookupEnv(k)
}

// hiddenEnv are mariposa's own secrets, kept from templates as from children.
var hiddenEnv = map[string]bool{"CONSUL_HTTP_TOKEN": true, "CONSUL_HTTP_TOKEN_FILE": true}

func (s *sandbox) getenv(k string) (string, error) {
	v, _ := s.lookup(k)
	return v, nil
}

func (s *sandbox) mustEnv(k string) (string, error) {
	v, _ := s.lookup(k)
	if v == "" {
		return "", fmt.Errorf("required environment variable %s is empty", k)
	}
	return v, nil
}

func (s *sandbox) envOrDefault(k, def string) (string, error) {
	if v, ok := s.lookup(k); ok {
		return v, nil
	}
	return def, nil
}

func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
