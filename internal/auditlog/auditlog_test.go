package auditlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

type rec struct {
	Seq  int    `json:"seq"`
	Text string `json:"text"`
}

// lines reads a file's JSON lines back.
func lines(t *testing.T, path string) []rec {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []rec
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r rec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: a line does not parse: %v: %q", path, err, sc.Text())
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Rotation keeps the files bounded in size and number, every line parses
// back, and nothing is lost or reordered among the files kept.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "audit.jsonl")
	const maxBytes, keep = 1000, 2
	w, err := Open(Options{Path: path, MaxBytes: maxBytes, Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		w.Write(rec{Seq: i, Text: strings.Repeat("x", i%40)})
		if i%50 == 0 {
			time.Sleep(10 * time.Millisecond) // let the queue drain: nothing may drop here
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Dropped() != 0 || w.Written() != n {
		t.Fatalf("written %d, dropped %d", w.Written(), w.Dropped())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		fi, _ := e.Info()
		if fi.Size() > maxBytes {
			t.Errorf("%s is %d bytes, over %d", e.Name(), fi.Size(), maxBytes)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", e.Name(), fi.Mode().Perm())
		}
	}
	if fmt.Sprint(names) != "[audit.jsonl audit.jsonl.1 audit.jsonl.2]" {
		t.Fatalf("files %v", names)
	}
	if fi, _ := os.Stat(filepath.Dir(path)); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v", fi.Mode().Perm())
	}
	// Oldest first: .2, .1, then the file; consecutive sequence numbers
	// ending at the last one written.
	var all []rec
	for _, p := range []string{path + ".2", path + ".1", path} {
		all = append(all, lines(t, p)...)
	}
	if len(all) == 0 || all[len(all)-1].Seq != n-1 {
		t.Fatalf("last line %+v", all)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq != all[i-1].Seq+1 {
			t.Fatalf("lines out of sequence: %d after %d", all[i].Seq, all[i-1].Seq)
		}
	}

	// Reopened, the file is appended to from its size: the next line
	// rotates when it would not fit.
	before := len(lines(t, path))
	w, err = Open(Options{Path: path, MaxBytes: maxBytes, Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(rec{Seq: n})
	w.Close()
	got := lines(t, path)
	if len(got) != before+1 && len(got) != 1 {
		t.Fatalf("after reopening: %d lines, had %d", len(got), before)
	}
	if got[len(got)-1].Seq != n {
		t.Fatalf("last line %+v", got[len(got)-1])
	}
}

// A line longer than MaxBytes is written alone in its file, and Keep -1
// keeps no old file.
func TestLongLineNoKeep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	w, err := Open(Options{Path: path, MaxBytes: 100, Keep: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(rec{Seq: 1})
	w.Write(rec{Seq: 2, Text: strings.Repeat("y", 300)})
	w.Write(rec{Seq: 3})
	w.Close()
	got := lines(t, path)
	if len(got) != 1 || got[0].Seq != 3 {
		t.Fatalf("lines %+v", got)
	}
	if _, err := os.Stat(path + ".1"); !os.IsNotExist(err) {
		t.Fatalf("an old file was kept: %v", err)
	}
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// A writer stuck on the disk never blocks the caller: lines beyond the
// queue are dropped, counted and reported once the disk moves again, and
// the ones queued are written.
func TestBlockedDiskNeverBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	release := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	logs := &logBuf{}
	const queue = 8
	w, err := openWith(Options{Path: path, Queue: queue, Log: hclog.New(&hclog.LoggerOptions{Output: logs})}, func() {
		once.Do(func() { close(entered) })
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(rec{Seq: 0})
	<-entered // the writer holds line 0 and waits on the "disk"
	const n = 10000
	start := time.Now()
	var slowest time.Duration
	for i := 1; i <= n; i++ {
		t0 := time.Now()
		w.Write(rec{Seq: i})
		slowest = max(slowest, time.Since(t0))
	}
	if took := time.Since(start); took > 2*time.Second || slowest > 100*time.Millisecond {
		t.Fatalf("%d writes took %s (slowest %s) with the disk stuck", n, took, slowest)
	}
	if d := w.Dropped(); d != n-queue {
		t.Fatalf("dropped %d, want %d", d, n-queue)
	}
	close(release)
	w.Close()
	got := lines(t, path)
	if len(got) != queue+1 || got[0].Seq != 0 || got[queue].Seq != queue {
		t.Fatalf("lines %+v", got)
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("dropped=%d", n-queue)) {
		t.Fatalf("the drop was not reported: %q", logs.String())
	}
	// After Close, lines are dropped, not sent on a closed channel.
	w.Write(rec{Seq: -1})
	if w.Dropped() != n-queue+1 {
		t.Fatalf("dropped after close: %d", w.Dropped())
	}
}

// A directory that cannot be written reports the error at Open.
func TestOpenError(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o600)
	if _, err := Open(Options{Path: filepath.Join(blocker, "a.jsonl")}); err == nil {
		t.Fatal("no error for a path under a file")
	}
	if _, err := Open(Options{}); err == nil {
		t.Fatal("no error for no path")
	}
}
