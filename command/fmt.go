package command

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/schema"
)

// FmtCommand rewrites service files in the canonical HCL style.
type FmtCommand struct {
	UI cli.Ui
	// Stdin is read for the path "-"; nil means os.Stdin.
	Stdin io.Reader
}

func (c *FmtCommand) Synopsis() string { return "Rewrites service files in the canonical format" }

func (c *FmtCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa fmt [options] PATH...

  Rewrites service files in place in the canonical HCL style (alignment,
  indentation, spacing), atomically, and lists the files it changed. A
  directory means every *.hcl in it. The path "-" formats standard input to
  standard output. Formatting twice changes nothing the second time.

  Files with syntax errors are reported with their source lines and left
  untouched; the exit status is then 1.

Options:

  -check    Change nothing: list the files that are not formatted and exit 1
            if there are any.

  -diff     Also print the changes as a unified diff.
`)
}

func (c *FmtCommand) Run(args []string) int {
	var check, diff bool
	flags := flag.NewFlagSet("fmt", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.BoolVar(&check, "check", false, "")
	flags.BoolVar(&diff, "diff", false, "")
	paths, ok := parsePaths(c.UI, flags, args, c.Help(), "fmt needs at least one file or directory, or - for standard input")
	if !ok {
		return 1
	}

	failed, unformatted := false, false
	for _, p := range paths {
		if p == "-" {
			ok, changed := c.fmtStdin(check, diff)
			failed = failed || !ok
			unformatted = unformatted || changed
			continue
		}
		files, err := fmtFiles(p)
		if err != nil {
			c.UI.Error(err.Error())
			failed = true
			continue
		}
		for _, f := range files {
			ok, changed := c.fmtFile(f, check, diff)
			failed = failed || !ok
			unformatted = unformatted || changed
		}
	}
	if failed || (check && unformatted) {
		return 1
	}
	return 0
}

// fmtFiles expands a path like Load does: a directory means its *.hcl files.
func fmtFiles(p string) ([]string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, ent := range entries {
		name := ent.Name()
		if !strings.HasSuffix(name, ".hcl") || strings.HasPrefix(name, ".") {
			continue
		}
		full := filepath.Join(p, name)
		if st, err := os.Stat(full); err == nil && !st.IsDir() {
			files = append(files, full)
		}
	}
	sort.Strings(files)
	return files, nil
}

// fmtFile formats one file; ok is false on any error, changed reports
// whether the file was (or, with -check, would be) rewritten.
func (c *FmtCommand) fmtFile(name string, check, diff bool) (ok, changed bool) {
	src, err := os.ReadFile(name)
	if err != nil {
		c.UI.Error(err.Error())
		return false, false
	}
	out, diags := schema.Format(src, name)
	if diags.HasErrors() {
		c.printDiags(diags)
		return false, false
	}
	if bytes.Equal(src, out) {
		return true, false
	}
	c.UI.Output(name)
	if diff {
		c.UI.Output(strings.TrimRight(unifiedDiff(name, src, out), "\n"))
	}
	if check {
		return true, true
	}
	if err := writeFileAtomic(name, out); err != nil {
		c.UI.Error(err.Error())
		return false, true
	}
	return true, true
}

func (c *FmtCommand) fmtStdin(check, diff bool) (ok, changed bool) {
	in := c.Stdin
	if in == nil {
		in = os.Stdin
	}
	src, err := io.ReadAll(in)
	if err != nil {
		c.UI.Error(err.Error())
		return false, false
	}
	out, diags := schema.Format(src, "<stdin>")
	if diags.HasErrors() {
		c.printDiags(diags)
		return false, false
	}
	changed = !bytes.Equal(src, out)
	switch {
	case diff:
		if changed {
			c.UI.Output(strings.TrimRight(unifiedDiff("<stdin>", src, out), "\n"))
		}
	case check:
		if changed {
			c.UI.Output("<stdin>")
		}
	default:
		// cli.Ui adds a newline; the formatted text already ends with one.
		c.UI.Output(strings.TrimSuffix(string(out), "\n"))
	}
	return true, changed
}

func (c *FmtCommand) printDiags(diags *schema.Diagnostics) {
	var buf bytes.Buffer
	_ = diags.WriteText(&buf, 0, false)
	c.UI.Error(strings.TrimRight(buf.String(), "\n"))
}

// writeFileAtomic replaces name (the file a symlink points to, if it is one)
// through a temporary file and a rename, keeping its permissions.
func writeFileAtomic(name string, data []byte) error {
	real, err := filepath.EvalSymlinks(name)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(real), "."+filepath.Base(real)+".fmt-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), real)
}

// unifiedDiff renders the line differences of a and b with three lines of
// context, like diff -u.
func unifiedDiff(name string, a, b []byte) string {
	al, bl := splitLines(a), splitLines(b)
	ops := diffLines(al, bl)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s (formatted)\n", name, name)
	const ctx = 3
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk runs from ctx lines before this change to ctx lines after
		// the last change that is within 2*ctx lines of the previous one.
		start := max(i-ctx, 0)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*ctx {
				break
			}
		}
		stop := min(end+ctx+1, len(ops))
		aStart, bStart, aLen, bLen := 0, 0, 0, 0
		for _, op := range ops[:start] {
			if op.kind != '+' {
				aStart++
			}
			if op.kind != '-' {
				bStart++
			}
		}
		for _, op := range ops[start:stop] {
			if op.kind != '+' {
				aLen++
			}
			if op.kind != '-' {
				bLen++
			}
		}
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", aStart+1, aLen, bStart+1, bLen)
		for _, op := range ops[start:stop] {
			out.WriteByte(op.kind)
			out.WriteString(op.line)
			out.WriteByte('\n')
		}
		i = stop
	}
	return out.String()
}

type diffOp struct {
	kind byte // ' ', '-' or '+'
	line string
}

func splitLines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// diffLines is a longest-common-subsequence diff after trimming the common
// prefix and suffix, which is all a formatter's small edits need.
func diffLines(a, b []string) []diffOp {
	var head, tail []diffOp
	for len(a) > 0 && len(b) > 0 && a[0] == b[0] {
		head = append(head, diffOp{' ', a[0]})
		a, b = a[1:], b[1:]
	}
	for len(a) > 0 && len(b) > 0 && a[len(a)-1] == b[len(b)-1] {
		tail = append([]diffOp{{' ', a[len(a)-1]}}, tail...)
		a, b = a[:len(a)-1], b[:len(b)-1]
	}
	// Past this size a quadratic table costs too much; show a full rewrite.
	var mid []diffOp
	if len(a)*len(b) > 4<<20 {
		for _, l := range a {
			mid = append(mid, diffOp{'-', l})
		}
		for _, l := range b {
			mid = append(mid, diffOp{'+', l})
		}
	} else {
		lcs := make([][]int32, len(a)+1)
		for i := range lcs {
			lcs[i] = make([]int32, len(b)+1)
		}
		for i := len(a) - 1; i >= 0; i-- {
			for j := len(b) - 1; j >= 0; j-- {
				if a[i] == b[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(a) && j < len(b) {
			switch {
			case a[i] == b[j]:
				mid = append(mid, diffOp{' ', a[i]})
				i++
				j++
			case lcs[i+1][j] >= lcs[i][j+1]:
				mid = append(mid, diffOp{'-', a[i]})
				i++
			default:
				mid = append(mid, diffOp{'+', b[j]})
				j++
			}
		}
		for ; i < len(a); i++ {
			mid = append(mid, diffOp{'-', a[i]})
		}
		for ; j < len(b); j++ {
			mid = append(mid, diffOp{'+', b[j]})
		}
	}
	return append(append(head, mid...), tail...)
}
