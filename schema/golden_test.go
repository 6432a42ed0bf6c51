package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// errorMarker is the trailing comment that names an expected error on its line.
var errorMarker = regexp.MustCompile(`# ERROR: ([^#]*[^#\s])`)

// TestInvalidGolden loads each file (or subdirectory) of testdata/invalid and
// checks that the errors produced are exactly the "# ERROR: <summary>"
// markers: same lines, same summaries, same counts.
func TestInvalidGolden(t *testing.T) {
	entries, err := os.ReadDir("testdata/invalid")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ent := range entries {
		path := filepath.Join("testdata/invalid", ent.Name())
		if !ent.IsDir() && !strings.HasSuffix(ent.Name(), ".hcl") {
			continue
		}
		n++
		t.Run(ent.Name(), func(t *testing.T) {
			want := expectedMarkers(t, path)
			if len(want) == 0 {
				t.Fatalf("%s has no # ERROR: markers", path)
			}
			cfg, diags := Load([]string{path}, LoadOptions{Environ: testEnv})
			if cfg != nil {
				t.Errorf("Load returned a config despite errors")
			}
			got := map[string]int{}
			for _, d := range diags.diags {
				if d.Severity != hcl.DiagError {
					continue
				}
				if d.Subject == nil {
					t.Errorf("error without a position: %s; %s", d.Summary, d.Detail)
					continue
				}
				got[markerKey(d.Subject.Filename, d.Subject.Start.Line, d.Summary)]++
				if d.Detail == "" {
					t.Errorf("%s:%d: %q has no detail", d.Subject.Filename, d.Subject.Start.Line, d.Summary)
				}
			}
			for _, k := range sortedKeys(want) {
				if got[k] < want[k] {
					t.Errorf("missing error %s (want %d, got %d)", k, want[k], got[k])
				}
			}
			for _, k := range sortedKeys(got) {
				if got[k] > want[k] {
					t.Errorf("unexpected error %s (want %d, got %d)", k, want[k], got[k])
				}
			}
			if t.Failed() {
				t.Logf("all diagnostics:\n%s", diags.Error())
			}
		})
	}
	if n < 5 {
		t.Fatalf("only %d invalid fixtures", n)
	}
}

func markerKey(file string, line int, summary string) string {
	return fmt.Sprintf("%s:%d: %s", filepath.ToSlash(file), line, summary)
}

// expectedMarkers reads the markers of a file or of every .hcl in a directory.
func expectedMarkers(t *testing.T, path string) map[string]int {
	t.Helper()
	files := []string{path}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.hcl"))
		sort.Strings(files)
	}
	want := map[string]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range errorMarker.FindAllStringSubmatch(line, -1) {
				want[markerKey(f, i+1, strings.TrimSpace(m[1]))]++
			}
		}
	}
	return want
}
