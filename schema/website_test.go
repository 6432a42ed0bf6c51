package schema

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docExample is one ```hcl block of the website.
type docExample struct {
	file    string
	line    int
	src     string
	invalid bool // marked with <!-- invalid --> before the fence or ```hcl (invalid)
	// want is the error summary named by <!-- invalid: Summary -->, if any.
	want string
}

func websiteExamples(t *testing.T) []docExample {
	t.Helper()
	var out []docExample
	err := filepath.WalkDir("../website", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		var (
			in      *docExample
			prev    string
			lineNum int
		)
		for sc.Scan() {
			lineNum++
			line := sc.Text()
			trimmed := strings.TrimSpace(line)
			switch {
			case in == nil && strings.HasPrefix(trimmed, "```hcl"):
				info := strings.TrimSpace(strings.TrimPrefix(trimmed, "```hcl"))
				in = &docExample{file: path, line: lineNum, invalid: info == "(invalid)"}
				if m := invalidMarker.FindStringSubmatch(prev); m != nil {
					in.invalid, in.want = true, strings.TrimSpace(m[1])
				}
			case in != nil && trimmed == "```":
				out = append(out, *in)
				in = nil
			case in != nil:
				in.src += line + "\n"
			}
			if trimmed != "" {
				prev = trimmed
			}
		}
		if in != nil {
			t.Errorf("%s:%d: unterminated ```hcl block", path, in.line)
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// invalidMarker marks the next example as invalid, optionally naming the
// summary of the error it shows.
var invalidMarker = regexp.MustCompile(`^<!-- invalid(?::\s*(.*?))?\s*-->$`)

// TestWebsiteExamples loads every ```hcl example of website/: valid ones
// must load without any diagnostic, those marked invalid must fail.
func TestWebsiteExamples(t *testing.T) {
	examples := websiteExamples(t)
	invalid := 0
	for _, ex := range examples {
		if ex.invalid {
			invalid++
		}
	}
	t.Logf("%d examples, %d of them invalid", len(examples), invalid)
	if len(examples) < 20 {
		t.Fatalf("found only %d examples under ../website", len(examples))
	}
	for _, ex := range examples {
		dir := t.TempDir()
		p := write(t, dir, "example.hcl", ex.src)
		_, diags := Load([]string{p}, LoadOptions{Environ: []string{"HOME=/home/x"}})
		where := ex.file + ":" + itoa(ex.line)
		switch {
		case ex.invalid && !diags.HasErrors():
			t.Errorf("%s: example marked invalid loads without errors", where)
		case ex.want != "" && !strings.Contains(diags.Error(), ": "+ex.want+"; "):
			t.Errorf("%s: example does not fail with %q:\n%s", where, ex.want, diags.Error())
		case !ex.invalid && diags.Len() > 0:
			t.Errorf("%s: example has diagnostics:\n%s", where, diags.Error())
		}
		// Examples are what users copy: they are in canonical format.
		if out, fd := Format([]byte(ex.src), "example.hcl"); !fd.HasErrors() && string(out) != ex.src {
			t.Errorf("%s: example is not formatted; mariposa fmt gives:\n%s", where, out)
		}
	}
}

func itoa(n int) string {
	return strconv.Itoa(n)
}
