package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// tool finds a command the build tests need; missing in CI is a failure.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found: %v", name, err)
		}
		t.Skipf("%s not found: %v", name, err)
	}
	return p
}

func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// mariposa builds elsewhere than Linux: validate, fmt and status work there,
// and run says it needs Linux. e2e is left out: it runs "mariposa run".
func TestCrossCompile(t *testing.T) {
	consultest.SkipShort(t, "cross-compiles the tree")
	goBin := tool(t, "go")
	run(t, []string{"GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0"}, goBin, "build", "-o", t.TempDir(), "./...")
	env := []string{"GOOS=freebsd", "GOARCH=amd64", "CGO_ENABLED=0"}
	var pkgs []string
	for _, p := range strings.Fields(run(t, env, goBin, "list", "./...")) {
		if !strings.HasSuffix(p, "/e2e") {
			pkgs = append(pkgs, p)
		}
	}
	run(t, env, goBin, append([]string{"vet"}, pkgs...)...)
}

// make build stamps the commit: `mariposa version` names it, with -dirty
// when the tree has changes. The binary is static, as the README says: no
// program interpreter, no shared library (and so none of the C library's
// pages in a running mariposa's memory).
func TestMakeBuildStampsCommit(t *testing.T) {
	consultest.SkipShort(t, "builds mariposa")
	makeBin, gitBin := tool(t, "make"), tool(t, "git")
	tool(t, "go")
	head, err := exec.Command(gitBin, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git rev-parse: %v", err)
		}
		t.Skipf("not a git checkout: %v", err)
	}
	want := strings.TrimSpace(string(head))
	bin := filepath.Join(t.TempDir(), "mariposa")
	run(t, nil, makeBin, "-s", "build", "BIN="+bin)
	if strings.TrimSpace(run(t, nil, gitBin, "status", "--porcelain")) != "" {
		want += "-dirty"
	}
	out := strings.TrimSpace(run(t, nil, bin, "version"))
	if !strings.HasPrefix(out, "mariposa v") || !strings.HasSuffix(out, " (commit "+want+")") {
		t.Errorf("mariposa version = %q, want the commit %q", out, want)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("make build: the binary has a program interpreter (dynamically linked); want a static binary")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("make build: the binary needs shared libraries %v (%v); want none", libs, err)
	}
}
