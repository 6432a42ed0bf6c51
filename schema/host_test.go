package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCheckHost(t *testing.T) {
	base := t.TempDir()
	bin := filepath.Join(base, "bin")
	other := filepath.Join(base, "other")
	app := filepath.Join(base, "app")
	for _, d := range []string{bin, other, filepath.Join(app, "sub"), filepath.Join(bin, "adir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := func(p string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	exe(filepath.Join(bin, "web"), 0o755)
	exe(filepath.Join(bin, "plain"), 0o644)
	exe(filepath.Join(other, "plain"), 0o755) // later in PATH: exec finds this one
	exe(filepath.Join(bin, "noexec"), 0o644)
	exe(filepath.Join(app, "run.sh"), 0o755)
	exe(filepath.Join(app, "data.txt"), 0o644)
	path := "PATH=" + bin + string(os.PathListSeparator) + other

	tests := []struct {
		name    string
		service string // the service body
		env     []string
		want    []string // warning summaries
		detail  string   // in the first warning's detail
	}{
		{"in PATH", `command = ["web"]`, []string{path}, nil, ""},
		{"found later in PATH", `command = ["plain"]`, []string{path}, nil, ""},
		{"not in PATH", `command = ["nosuch", "-x"]`, []string{path}, []string{"Program not found"}, `"nosuch" is in no directory of PATH`},
		{"empty PATH", `command = ["web"]`, []string{}, []string{"Program not found"}, "PATH is empty"},
		{"in PATH, not executable", `command = ["noexec"]`, []string{path}, []string{"Program not executable"}, filepath.Join(bin, "noexec")},
		{"a directory in PATH is skipped", `command = ["adir"]`, []string{path}, []string{"Program not found"}, ""},
		{"absolute", fmt.Sprintf(`command = [%q]`, filepath.Join(bin, "web")), nil, nil, ""},
		{"absolute missing", `command = ["/nonexistent/prog"]`, nil, []string{"Program not found"}, "it does not exist"},
		{"absolute not executable", fmt.Sprintf(`command = [%q]`, filepath.Join(bin, "noexec")), nil, []string{"Program not executable"}, "not executable (mode -rw-r--r--)"},
		{"absolute directory", fmt.Sprintf(`command = [%q]`, bin), nil, []string{"Program not executable"}, "it is a directory"},
		{"relative to dir", fmt.Sprintf(`command = ["./run.sh"]
  dir     = %q`, app), nil, nil, ""},
		{"relative to dir, missing", fmt.Sprintf(`command = ["sub/run.sh"]
  dir     = %q`, app), nil, []string{"Program not found"}, filepath.Join(app, "sub/run.sh")},
		{"relative to dir, not executable", fmt.Sprintf(`command = ["./data.txt"]
  dir     = %q`, app), nil, []string{"Program not executable"}, "not executable"},
		{"dir missing", `command = ["/bin/sh"]
  dir     = "/nonexistent/dir"`, nil, []string{"Directory not found"}, "/nonexistent/dir"},
		{"dir missing, relative program not checked again", `command = ["./run.sh"]
  dir     = "/nonexistent/dir"`, nil, []string{"Directory not found"}, ""},
		{"dir is a file", fmt.Sprintf(`command = ["/bin/sh"]
  dir     = %q`, filepath.Join(app, "data.txt")), nil, []string{"Not a directory"}, "is not a directory"},
		{"dir relative to the file", `command = ["/bin/sh"]
  dir     = "missing-here"`, nil, []string{"Directory not found"}, "missing-here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "service \"a\" {\n  " + tt.service + "\n}\n"
			env := tt.env
			if env == nil {
				env = []string{path}
			}
			cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: env, CheckHost: true})
			if cfg == nil || diags.HasErrors() {
				t.Fatalf("host problems must not be errors: %s", diags.Error())
			}
			var got []string
			for _, d := range diags.All() {
				got = append(got, d.Summary)
				if d.Severity != "warning" || d.Range == nil {
					t.Errorf("diagnostic %+v", d)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("warnings %q, want %q:\n%s", got, tt.want, diags.Error())
			}
			if len(got) > 0 && !strings.Contains(diags.All()[0].Detail, tt.detail) {
				t.Errorf("detail %q lacks %q", diags.All()[0].Detail, tt.detail)
			}
			// The warning points at the attribute it is about.
			if len(got) > 0 {
				wantLine := 2
				if strings.HasPrefix(tt.want[0], "Dir") || tt.want[0] == "Not a directory" {
					wantLine = 3
				}
				if l := diags.All()[0].Range.Start.Line; l != wantLine {
					t.Errorf("warning on line %d, want %d", l, wantLine)
				}
			}

			// Without CheckHost the same file is clean.
			if _, d := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: env}); d.Len() != 0 {
				t.Errorf("without CheckHost: %s", d.Error())
			}
		})
	}
}

// TestCheckHostRelativeToWorkingDir: without dir, a relative program with a
// slash is looked up from the working directory, as the process would be.
func TestCheckHostRelativeToWorkingDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "app"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	src := `service "a" { command = ["./bin/app"] }`
	if _, d := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}, CheckHost: true}); d.Len() != 0 {
		t.Fatalf("found program warned about: %s", d.Error())
	}
	src = `service "a" { command = ["./bin/nope"] }`
	if _, d := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}, CheckHost: true}); d.WarningCount() != 1 ||
		!strings.Contains(d.Error(), "Program not found") {
		t.Fatalf("missing program: %s", d.Error())
	}
}
