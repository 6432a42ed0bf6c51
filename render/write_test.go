package render

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestAtomicWriteNeverPartial: a reader looping on the destination during
// 1,000 renders sees only complete contents, never an empty or partial file.
func TestAtomicWriteNeverPartial(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "conf", "app.conf")
	contents := [][]byte{
		bytes.Repeat([]byte("a"), 8<<10),
		bytes.Repeat([]byte("bb\n"), 10),
		bytes.Repeat([]byte("c"), 24<<10),
	}
	if _, err := writeFile(dest, contents[0], 0o644); err != nil {
		t.Fatal(err)
	}
	valid := map[string]bool{}
	for _, c := range contents {
		valid[string(c)] = true
	}

	var stop atomic.Bool
	var reads, bad atomic.Int64
	var wg sync.WaitGroup
	var firstBad atomic.Value
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				b, err := os.ReadFile(dest)
				reads.Add(1)
				if err != nil || !valid[string(b)] {
					if bad.Add(1) == 1 {
						firstBad.Store(len(b))
					}
				}
			}
		}()
	}
	for i := range 1000 {
		changed, err := writeFile(dest, contents[(i+1)%len(contents)], 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if !changed {
			t.Fatalf("render %d: content changed but nothing was written", i)
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d of %d reads saw an empty, partial or missing file (first: %v bytes)", bad.Load(), reads.Load(), firstBad.Load())
	}
	t.Logf("%d reads during 1000 renders, all complete", reads.Load())
	// No temporary file is left behind.
	ents, _ := os.ReadDir(filepath.Dir(dest))
	if len(ents) != 1 {
		t.Fatalf("destination directory holds %d entries; want only the file", len(ents))
	}
}

func TestWritePerms(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dest := filepath.Join(t.TempDir(), "f")
	for _, perm := range []os.FileMode{0o640, 0o755, 0o600, 0o644} {
		if _, err := writeFile(dest, []byte(perm.String()), perm); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dest)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != perm {
			t.Errorf("mode %v; want %v (umask must not apply)", fi.Mode().Perm(), perm)
		}
	}
	// Same content, other perms: fixed in place, not rewritten.
	if changed, err := writeFile(dest, []byte(os.FileMode(0o644).String()), 0o600); err != nil || changed {
		t.Fatalf("chmod-only write: changed=%v err=%v", changed, err)
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v; want 0600", fi.Mode().Perm())
	}
}

func TestUnchangedContentNotRewritten(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "f")
	if _, err := writeFile(dest, []byte("same"), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(dest, past, past); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(dest)
	changed, err := writeFile(dest, []byte("same"), 0o644)
	if err != nil || changed {
		t.Fatalf("changed=%v err=%v; want no write", changed, err)
	}
	after, _ := os.Stat(dest)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("mtime moved from %v to %v", before.ModTime(), after.ModTime())
	}
	if before.Sys().(*syscall.Stat_t).Ino != after.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("inode changed: the file was replaced")
	}
}

func TestWriteErrorKeepsFile(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "f")
	if _, err := writeFile(dest, []byte("good"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// root ignores directory permissions; use a path that cannot exist
		if _, err := writeFile(filepath.Join(dest, "sub"), []byte("x"), 0o644); err == nil {
			t.Fatal("writing under a file succeeded")
		}
	} else {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		if _, err := writeFile(dest, []byte("bad"), 0o644); err == nil {
			t.Fatal("write into a read-only directory succeeded")
		}
	}
	if b, _ := os.ReadFile(dest); string(b) != "good" {
		t.Fatalf("file is %q; want the last good content", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || strings.HasPrefix(ents[0].Name(), ".") {
		t.Fatalf("temporary files left: %v", ents)
	}
}

// TestWriteConcurrent: renders writing into the same directories at once
// (their files put in place in shared batches) each get their own content,
// mode and result; a file that cannot be put in place fails alone; no
// temporary file is left.
func TestWriteConcurrent(t *testing.T) {
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b")}
	// A destination that is a non-empty directory: its rename fails.
	bad := filepath.Join(dirs[0], "taken")
	if err := os.MkdirAll(filepath.Join(bad, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 60
	path := func(i int) string { return filepath.Join(dirs[i%2], fmt.Sprintf("f%02d.conf", i)) }
	perm := func(i int) os.FileMode { return []os.FileMode{0o644, 0o600, 0o640}[i%3] }
	for round := range 4 {
		content := func(i int) []byte {
			// The last round writes what the one before did.
			return []byte(fmt.Sprintf("%d:%d:%s", min(round, 2), i, strings.Repeat("x", i*37)))
		}
		var wg sync.WaitGroup
		changed := make([]bool, n)
		errs := make([]error, n)
		var badErr error
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				changed[i], errs[i] = writeFile(path(i), content(i), perm(i))
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, badErr = writeFile(bad, []byte("x"), 0o644)
		}()
		close(start)
		wg.Wait()
		if badErr == nil {
			t.Errorf("round %d: writing over a non-empty directory succeeded", round)
		}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: %s: %v", round, path(i), errs[i])
			}
			if want := round < 3; changed[i] != want {
				t.Errorf("round %d: %s: changed=%v; want %v", round, path(i), changed[i], want)
			}
			b, err := os.ReadFile(path(i))
			if err != nil || !bytes.Equal(b, content(i)) {
				t.Fatalf("round %d: %s holds %q (%v); want %q", round, path(i), b, err, content(i))
			}
			if fi, _ := os.Stat(path(i)); fi.Mode().Perm() != perm(i) {
				t.Errorf("round %d: %s: mode %v; want %v", round, path(i), fi.Mode().Perm(), perm(i))
			}
		}
	}
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("temporary file left: %s", filepath.Join(d, e.Name()))
			}
		}
	}
}
