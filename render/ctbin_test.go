package render

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	ctversion "github.com/hashicorp/consul-template/version"
)

// consulTemplateVersion is the consul-template release linked into mariposa
// (go.mod's), the one the cross-check runs as a program and the benchmarks
// measure beside mariposa.
const consulTemplateVersion = "v" + ctversion.Version + ctversion.VersionPrerelease

// consulTemplateEnv names the variable that points at a consul-template
// binary; the GNUmakefile's test and bench targets set it.
const consulTemplateEnv = "MARIPOSA_CONSUL_TEMPLATE_BIN"

// consulTemplateCache is where tools/consul-template/build.sh caches the
// build of consulTemplateVersion.
func consulTemplateCache() string {
	cache := os.Getenv("MARIPOSA_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "mariposa")
	}
	v := strings.TrimPrefix(consulTemplateVersion, "v")
	return filepath.Join(cache, fmt.Sprintf("consul-template-%s-%s-%s", v, runtime.GOOS, runtime.GOARCH), "consul-template")
}

// consulTemplateBinary returns the path of a consul-template binary of
// consulTemplateVersion: $MARIPOSA_CONSUL_TEMPLATE_BIN, else the cached
// build. With build, a missing one is built into the cache first (by
// tools/consul-template/build.sh, as `make consul-template` does).
func consulTemplateBinary(tb testing.TB, build bool) (string, error) {
	tb.Helper()
	bin := os.Getenv(consulTemplateEnv)
	switch {
	case bin != "":
	case build:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "tools", "consul-template", "build.sh"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("tools/consul-template/build.sh: %v", err)
		}
		bin = strings.TrimSpace(string(out))
	default:
		bin = consulTemplateCache()
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("consul-template %s not built (%v): run `make consul-template`, or set %s", consulTemplateVersion, err, consulTemplateEnv)
		}
	}
	out, err := exec.Command(bin, "-v").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s -v: %v", bin, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if want := "consul-template " + consulTemplateVersion; first != want && !strings.HasPrefix(first, want+" ") {
		return "", fmt.Errorf("%s reports %q; mariposa links consul-template %s", bin, first, consulTemplateVersion)
	}
	return bin, nil
}

// The tests of tools/consul-template/build.sh. None builds consul-template:
// MARIPOSA_CONSUL_TEMPLATE_BUILD_CMD stands in for `go install`, a script
// that counts its runs, waits delay, and writes a stand-in consul-template
// reporting version.
func ctBuildStub(t *testing.T, delay time.Duration, version string) (cmd, count string) {
	t.Helper()
	dir := t.TempDir()
	count = filepath.Join(dir, "builds")
	fake := filepath.Join(dir, "fake")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'consul-template "+version+" (0000000)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = filepath.Join(dir, "build-stub")
	body := fmt.Sprintf("#!/bin/sh\necho build >> %q\nsleep %g\ncp %q \"$1\"\n", count, delay.Seconds(), fake)
	if err := os.WriteFile(cmd, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return cmd, count
}

func runCTBuild(t *testing.T, cache, stub string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join("..", "tools", "consul-template", "build.sh"))
	cmd.Env = append(os.Environ(), "MARIPOSA_CACHE="+cache, "MARIPOSA_CONSUL_TEMPLATE_BUILD_CMD="+stub)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return strings.TrimSpace(out.String()), errb.String(), err
}

func countBuilds(t *testing.T, count string) int {
	t.Helper()
	b, err := os.ReadFile(count)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "build\n")
}

// Callers that find no binary while a build runs wait for it and use its
// result; later callers use the cache as is; a binary of another version is
// built again. The path is the one the tests look in.
func TestConsulTemplateBuildScript(t *testing.T) {
	for _, tool := range []string{"bash", "flock", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("build.sh needs %s: %v", tool, err)
		}
	}
	cache := t.TempDir()
	t.Setenv("MARIPOSA_CACHE", cache)
	t.Setenv(consulTemplateEnv, "") // the tests look in the cache
	want := consulTemplateCache()
	stub, count := ctBuildStub(t, 3*time.Second, consulTemplateVersion)

	type result struct {
		out, errOut string
		err         error
	}
	results := make(chan result, 4)
	go func() { o, e, err := runCTBuild(t, cache, stub); results <- result{o, e, err} }()
	deadline := time.Now().Add(30 * time.Second)
	for countBuilds(t, count) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first caller never started building")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		go func() { o, e, err := runCTBuild(t, cache, stub); results <- result{o, e, err} }()
	}
	waited := 0
	for range 4 {
		r := <-results
		if r.err != nil || r.out != want {
			t.Errorf("%v; stdout %q, want %q; stderr:\n%s", r.err, r.out, want, r.errOut)
		}
		if strings.Contains(r.errOut, "waiting for it") {
			waited++
		}
	}
	if n := countBuilds(t, count); n != 1 || waited != 3 {
		t.Fatalf("%d builds and %d callers waited; want 1 and 3", n, waited)
	}
	if out, errOut, err := runCTBuild(t, cache, stub); err != nil || out != want || countBuilds(t, count) != 1 {
		t.Fatalf("with the binary cached: %v, %q, %d builds; stderr:\n%s", err, out, countBuilds(t, count), errOut)
	}
	if _, err := consulTemplateBinary(t, false); err != nil {
		t.Fatalf("the tests do not find the script's binary: %v", err)
	}

	// Another version in the cache ("v0.41.10" is not "v0.41.1"): built again.
	if err := os.WriteFile(want, []byte("#!/bin/sh\necho 'consul-template "+consulTemplateVersion+"0 (0000000)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := consulTemplateBinary(t, false); err == nil {
		t.Fatal("the tests take a binary of another version")
	}
	if out, errOut, err := runCTBuild(t, cache, stub); err != nil || out != want || countBuilds(t, count) != 2 {
		t.Fatalf("with another version cached: %v, %q, %d builds (want 2); stderr:\n%s", err, out, countBuilds(t, count), errOut)
	}
}
