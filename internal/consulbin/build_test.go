package consulbin

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests of tools/consul/build.sh, which is its own module (so `go test
// ./...` from the root would never reach a test there). None of them builds
// Consul: MARIPOSA_CONSUL_BUILD_CMD stands in for `go build`.

const buildScript = "../../tools/consul/build.sh"

// fakeConsul is a stand-in consul whose `version` prints the pinned version
// and then more than a pipe holds, the way a reader that stops at the first
// line makes the writer die of SIGPIPE.
func fakeConsul(version string) string {
	return fmt.Sprintf(`#!/bin/sh
echo "Consul v%s"
i=0
while [ $i -lt 4000 ]; do
  echo "Revision 0000000000000000000000000000000000000000 (padding line $i)"
  i=$((i+1))
done
`, version)
}

// writeExec writes an executable script.
func writeExec(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// stubBuilder writes a build command that counts its runs in count, waits
// for delay, then writes a fake consul to the path it is given. With fail
// it writes nothing and exits 1: for tests in which building is the bug.
func stubBuilder(t *testing.T, dir string, delay time.Duration, fail bool) (cmd, count string) {
	t.Helper()
	count = filepath.Join(dir, "builds")
	fake := filepath.Join(dir, "fake-consul")
	writeExec(t, fake, fakeConsul(Version))
	body := fmt.Sprintf("echo build >> %q\nsleep %g\ncp %q \"$1\"\n", count, delay.Seconds(), fake)
	if fail {
		body = fmt.Sprintf("echo build >> %q\necho 'stub: asked to build' >&2\nexit 1\n", count)
	}
	cmd = filepath.Join(dir, "build-stub")
	writeExec(t, cmd, "#!/bin/sh\n"+body)
	return cmd, count
}

func builds(t *testing.T, count string) int {
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

type runResult struct {
	stdout, stderr string
	err            error
}

func runBuild(cache, buildCmd string) runResult {
	cmd := exec.Command("bash", buildScript)
	cmd.Env = append(os.Environ(), "MARIPOSA_CACHE="+cache, "MARIPOSA_CONSUL_BUILD_CMD="+buildCmd)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return runResult{strings.TrimSpace(out.String()), errb.String(), err}
}

func cacheBinary(cache string) string {
	return filepath.Join(cache, fmt.Sprintf("consul-%s-%s-%s", Version, runtime.GOOS, runtime.GOARCH), "consul")
}

// inode identifies the file at path, to see whether it was replaced.
func inode(t *testing.T, path string) (uint64, time.Time) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()
}

// requireTools fails (a broken setup, not a reason to skip) without what
// build.sh needs.
func requireTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "flock", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("build.sh needs %s: %v", tool, err)
		}
	}
}

// assertNeverRebuilds runs build.sh n times against a cache that holds a
// pinned consul (at bin) and fails if any run decides to build.
func assertNeverRebuilds(t *testing.T, cache, bin string, n int) {
	t.Helper()
	stub, count := stubBuilder(t, t.TempDir(), 0, true)
	ino, mtime := inode(t, bin)
	for i := range n {
		r := runBuild(cache, stub)
		if r.err != nil || strings.Contains(r.stderr, "building") || r.stdout != bin {
			t.Fatalf("run %d: %v; stdout %q; stderr:\n%s", i+1, r.err, r.stdout, r.stderr)
		}
	}
	if n := builds(t, count); n != 0 {
		t.Fatalf("build.sh built %d times with a pinned consul in the cache", n)
	}
	if ino2, mtime2 := inode(t, bin); ino2 != ino || !mtime2.Equal(mtime) {
		t.Fatal("the cached consul was replaced")
	}
}

// A cached consul whose `version` output is longer than a pipe holds: the
// check used to pipe it into `grep -q`, which exits at the first line, and
// under pipefail consul's SIGPIPE read as "not the pinned version": a
// rebuild. Deterministic, unlike the real binary's short output.
func TestBuildScriptKeepsCachedBinaryWithLongVersionOutput(t *testing.T) {
	requireTools(t)
	cache := t.TempDir()
	bin := cacheBinary(cache)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	writeExec(t, bin, fakeConsul(Version))
	assertNeverRebuilds(t, cache, bin, 20)
}

// The same with the real cached Consul (linked into a scratch cache, so a
// regression can never replace the shared binary).
func TestBuildScriptKeepsRealCachedBinary(t *testing.T) {
	requireTools(t)
	real, err := Find(false)
	if err != nil {
		t.Fatalf("%v", err) // every test run needs Consul anyway
	}
	cache := t.TempDir()
	bin := cacheBinary(cache)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, bin); err != nil {
		t.Fatal(err)
	}
	assertNeverRebuilds(t, cache, bin, 20)
}

// A binary of another version is rebuilt.
func TestBuildScriptRebuildsOtherVersion(t *testing.T) {
	requireTools(t)
	cache := t.TempDir()
	bin := cacheBinary(cache)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	writeExec(t, bin, fakeConsul(Version+"0")) // v1.20.60 is not v1.20.6
	stub, count := stubBuilder(t, t.TempDir(), 0, false)
	r := runBuild(cache, stub)
	if r.err != nil || r.stdout != bin {
		t.Fatalf("%v; stdout %q; stderr:\n%s", r.err, r.stdout, r.stderr)
	}
	if n := builds(t, count); n != 1 {
		t.Fatalf("%d builds, want 1", n)
	}
}

// Callers that find no binary while a build runs wait for it and use its
// result: one build, every caller gets the path, nothing is built twice.
func TestBuildScriptConcurrentCallersBuildOnce(t *testing.T) {
	requireTools(t)
	cache := t.TempDir()
	stub, count := stubBuilder(t, t.TempDir(), 5*time.Second, false)
	bin := cacheBinary(cache)

	first := make(chan runResult, 1)
	go func() { first <- runBuild(cache, stub) }()
	// The others start once the first is building.
	deadline := time.Now().Add(30 * time.Second)
	for builds(t, count) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first caller never started building")
		}
		time.Sleep(10 * time.Millisecond)
	}
	const others = 3
	results := make([]runResult, others)
	var wg sync.WaitGroup
	for i := range others {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = runBuild(cache, stub) }()
	}
	wg.Wait()
	results = append(results, <-first)
	waited := 0
	for i, r := range results {
		if r.err != nil || r.stdout != bin {
			t.Errorf("caller %d: %v; stdout %q; stderr:\n%s", i, r.err, r.stdout, r.stderr)
		}
		if strings.Contains(r.stderr, "waiting for it") {
			waited++
		}
	}
	if n := builds(t, count); n != 1 {
		t.Errorf("%d builds, want 1", n)
	}
	if waited != others {
		t.Errorf("%d callers said they waited, want %d", waited, others)
	}
	// And afterwards, the cached result is used as is.
	assertNeverRebuilds(t, cache, bin, 3)
}
