package volume

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func init() {
	retryBackoff = 10 * time.Millisecond
	hookWaitDelay = 200 * time.Millisecond
}

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "volumes"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeAll(s.Root) }) // read-only directories
	// No fsync but in the tests that check it (a syncfs flushes the whole
	// filesystem the tests share with others).
	s.NoSync = true
	return s
}

func allowAll(*http.Request, string, int) error { return nil }

// server serves s's handler, through mw if set, and counts the requests.
type server struct {
	*httptest.Server
	requests atomic.Int64
}

func serve(t testing.TB, s *Store, authorize func(*http.Request, string, int) error, mw func(http.Handler) http.Handler) *server {
	t.Helper()
	h := s.Handler(authorize)
	if mw != nil {
		h = mw(h)
	}
	srv := &server{}
	srv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

var testTime = time.Date(2026, 11, 23, 10, 4, 0, 123456789, time.UTC)

func write(t testing.TB, p string, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// makeTree fills dir with nested directories, symlinks (relative,
// absolute, dangling), empty files, a long name, various modes and
// mtimes with nanoseconds.
func makeTree(t testing.TB, dir string) {
	t.Helper()
	long := strings.Repeat("l", 120)
	write(t, filepath.Join(dir, "a.txt"), "hello\n", 0o644)
	write(t, filepath.Join(dir, "empty"), "", 0o600)
	write(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	write(t, filepath.Join(dir, "ro"), "read only", 0o444)
	write(t, filepath.Join(dir, "sub", "deeper", "x.bin"), strings.Repeat("\x00\x01\xff", 4000), 0o640)
	write(t, filepath.Join(dir, "sub", long, "f"), "long dir", 0o600)
	write(t, filepath.Join(dir, "sub", "z"), strings.Repeat("z", 513), 0o600)
	if err := os.MkdirAll(filepath.Join(dir, "emptydir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ target, name string }{
		{"a.txt", "link-rel"},
		{"../a.txt", "sub/link-up"},
		{"/etc/hostname", "link-abs"},
		{"nowhere", "sub/dangling"},
		{"deeper", "sub/link-dir"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, filepath.FromSlash(l.name))); err != nil {
			t.Fatal(err)
		}
	}
	// Modes of directories last (a 0555 directory cannot be filled).
	if err := os.Chmod(filepath.Join(dir, "sub", "deeper"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "sub"), 0o2750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	// mtimes, children first.
	var paths []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	})
	for i := len(paths) - 1; i >= 0; i-- {
		if err := setMtime(paths[i], testTime.Add(time.Duration(i)*time.Second+time.Duration(i))); err != nil {
			t.Fatal(err)
		}
	}
}

// state describes a tree: every entry's type, mode, mtime, size and
// contents' checksum, or symlink target.
func state(t testing.TB, dir string) map[string]string {
	t.Helper()
	st := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		desc := fmt.Sprintf("%v %d", fi.Mode(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" %d %s", len(b), hex.EncodeToString(sum[:8]))
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc = fmt.Sprintf("symlink %d -> %s", fi.ModTime().UnixNano(), target)
		}
		st[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func sameState(t testing.TB, got, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: got %q, want %q", k, got[k], want[k])
		}
	}
}

// leftovers lists the names next to a volume's live directory that are
// not it (a swap or a restore in progress).
func leftovers(t testing.TB, live string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(live))
	if err != nil {
		t.Fatal(err)
	}
	var l []string
	for _, e := range ents {
		if e.Name() != filepath.Base(live) {
			l = append(l, e.Name())
		}
	}
	return l
}

// source makes the Source of s's current directory snapshot of u/k/p.
func source(srv *server, unit string, k int, path string, m Meta) Source {
	return Source{URL: SnapshotURL(srv.URL, unit, k, path, m.SHA256), SHA256: m.SHA256, Size: m.Size}
}

var (
	tarHeaderDir  = tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: testTime}
	tarHeaderFile = tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644, ModTime: testTime}
)

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.total = ms.TotalAlloc
}
