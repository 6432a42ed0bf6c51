package volume

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// handoff: the old holder's store with a tree in u/0/data, snapshotted,
// served; the new holder's store.
type handoffCase struct {
	old, new *Store
	srv      *server
	meta     Meta
	want     map[string]string
}

func newHandoff(t *testing.T, mw func(http.Handler) http.Handler) *handoffCase {
	t.Helper()
	h := &handoffCase{old: newStore(t), new: newStore(t)}
	dir, err := h.old.Ensure("u", 0, "data")
	if err != nil {
		t.Fatal(err)
	}
	makeTree(t, dir)
	h.want = state(t, dir)
	h.meta, err = h.old.Snapshot(context.Background(), "u", 0, "data", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = serve(t, h.old, allowAll, mw)
	return h
}

func (h *handoffCase) restore(t *testing.T, hook []string, timeout time.Duration) (Meta, error) {
	t.Helper()
	return h.new.Restore(context.Background(), "u", 0, "data", source(h.srv, "u", 0, "data", h.meta), hook, nil, timeout)
}

// existing gives the new holder a live directory of its own, to check
// that a failed restore leaves it alone.
func (h *handoffCase) existing(t *testing.T) map[string]string {
	t.Helper()
	dir, err := h.new.Ensure("u", 0, "data")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "old"), "the data before", 0o600)
	return state(t, dir)
}

func TestRoundTrip(t *testing.T) {
	h := newHandoff(t, nil)
	if h.meta.Files != len(h.want)-1 {
		t.Errorf("Files = %d, want %d", h.meta.Files, len(h.want)-1)
	}
	before := h.existing(t)
	h.new.NoSync = false // the default: the new tree is flushed before the swap
	m, err := h.restore(t, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if m.SHA256 != h.meta.SHA256 || m.Size != h.meta.Size || m.Files != h.meta.Files || !m.TakenAt.Equal(h.meta.TakenAt) {
		t.Errorf("Restore's Meta %+v, snapshot's %+v", m, h.meta)
	}
	live := h.new.Dir("u", 0, "data")
	sameState(t, state(t, live), h.want)
	if _, ok := before["old"]; !ok {
		t.Fatal("setup")
	}
	if l := leftovers(t, live); len(l) != 0 {
		t.Errorf("left next to the live directory: %v", l)
	}
	// The source is unchanged, and a second snapshot of the copy hashes
	// the same.
	sameState(t, state(t, h.old.Dir("u", 0, "data")), h.want)
	m2, err := h.new.Snapshot(context.Background(), "u", 0, "data", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m2.SHA256 != h.meta.SHA256 || m2.Size != h.meta.Size {
		t.Errorf("snapshot of the restored copy %+v, of the original %+v", m2, h.meta)
	}
}

func TestDeterministic(t *testing.T) {
	s := newStore(t)
	dir, _ := s.Ensure("u", 1, "data")
	makeTree(t, dir)
	ctx := context.Background()
	m1, err := s.Snapshot(ctx, "u", 1, "data", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := s.Snapshot(ctx, "u", 1, "data", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m1.SHA256 != m2.SHA256 || m1.Size != m2.Size {
		t.Fatalf("two passes: %+v and %+v", m1, m2)
	}
	// The streamed bytes are the hashed ones, and so are a snapshot file's.
	srv := serve(t, s, allowAll, nil)
	resp, err := http.Get(SnapshotURL(srv.URL, "u", 1, "data", m1.SHA256))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != m1.SHA256 || int64(len(body)) != m1.Size {
		t.Fatalf("streamed %d bytes with sha256 %x, snapshot %+v", len(body), sum, m1)
	}
	if resp.Header.Get(HeaderSHA256) != m1.SHA256 || resp.ContentLength != m1.Size {
		t.Errorf("headers %v", resp.Header)
	}
	fm, err := s.SnapshotFile(ctx, "u", 1, "data", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fm.SHA256 != m1.SHA256 {
		t.Errorf("snapshot file sha256 %s, directory %s", fm.SHA256, m1.SHA256)
	}
	fb, _ := os.ReadFile(s.fileTarPath("u", 1, "data"))
	if !bytes.Equal(fb, body) {
		t.Error("the snapshot file differs from the stream")
	}
	// A changed byte (same size, same mtime) changes the checksum.
	p := filepath.Join(dir, "sub", "z")
	fi, _ := os.Stat(p)
	write(t, p, "y"+strings.Repeat("z", 512), 0o600)
	_ = setMtime(p, fi.ModTime())
	m3, err := s.Snapshot(ctx, "u", 1, "data", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m3.SHA256 == m1.SHA256 || m3.Size != m1.Size {
		t.Errorf("a changed byte: %+v, before %+v", m3, m1)
	}
}

// flipper flips the byte at offset at of every response body.
func flipper(at int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&flipWriter{ResponseWriter: w, at: at}, r)
		})
	}
}

type flipWriter struct {
	http.ResponseWriter
	at, n int64
}

func (f *flipWriter) Write(p []byte) (int, error) {
	if f.n <= f.at && f.at < f.n+int64(len(p)) {
		p = append([]byte(nil), p...)
		p[f.at-f.n] ^= 0x20
	}
	f.n += int64(len(p))
	return f.ResponseWriter.Write(p)
}

func TestFlippedByteRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   int64
	}{
		{"in a header", 1540},     // inside the first entries' headers
		{"in file contents", -1},  // a byte of sub/deeper/x.bin
		{"in the end blocks", -2}, // the last byte of the stream
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := newHandoff(t, nil)
			at := tc.at
			switch at {
			case -1:
				at = offsetOf(t, probe, strings.Repeat("\x00\x01\xff", 100)) + 7
			case -2:
				at = probe.meta.Size - 1
			}
			h := newHandoff(t, flipper(at))
			before := h.existing(t)
			_, err := h.restore(t, nil, time.Minute)
			if !errors.Is(err, ErrChecksum) {
				t.Fatalf("Restore: %v, want %v", err, ErrChecksum)
			}
			if !strings.Contains(err.Error(), "expected "+h.meta.SHA256) {
				t.Errorf("the error does not say what was expected: %v", err)
			}
			if n := h.srv.requests.Load(); n != 1 {
				t.Errorf("%d requests: a checksum mismatch is not tried again", n)
			}
			live := h.new.Dir("u", 0, "data")
			sameState(t, state(t, live), before)
			if l := leftovers(t, live); len(l) != 0 {
				t.Errorf("left next to the live directory: %v", l)
			}
		})
	}
}

// offsetOf finds data in the snapshot's stream.
func offsetOf(t *testing.T, h *handoffCase, data string) int64 {
	t.Helper()
	resp, err := http.Get(SnapshotURL(h.srv.URL, "u", 0, "data", h.meta.SHA256))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	i := bytes.Index(b, []byte(data))
	if i < 0 {
		t.Fatal("not in the stream")
	}
	return int64(i)
}

// truncator cuts the connection after n bytes of the first fail bodies.
func truncator(n int64, fail int64) func(http.Handler) http.Handler {
	var count int64
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			count++
			if count > fail {
				next.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(&truncWriter{ResponseWriter: w, left: n}, r)
		})
	}
}

type truncWriter struct {
	http.ResponseWriter
	left int64
}

func (tw *truncWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > tw.left {
		p = p[:tw.left]
		tw.ResponseWriter.Write(p)
		tw.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	tw.left -= int64(len(p))
	return tw.ResponseWriter.Write(p)
}

func TestTruncatedStream(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     int64
		at       int64
		wantErr  bool
		requests int64
	}{
		{"always: three attempts, then an error", 100, 5000, true, 3},
		{"at a header boundary", 100, 1024, true, 3},
		{"once: the second attempt restores", 1, 5000, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandoff(t, truncator(tc.at, tc.fail))
			before := h.existing(t)
			_, err := h.restore(t, nil, time.Minute)
			live := h.new.Dir("u", 0, "data")
			if tc.wantErr {
				if err == nil || errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "attempt 3 of 3") {
					t.Fatalf("Restore: %v, want a transport error after 3 attempts", err)
				}
				sameState(t, state(t, live), before)
			} else {
				if err != nil {
					t.Fatal(err)
				}
				sameState(t, state(t, live), h.want)
			}
			if n := h.srv.requests.Load(); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			if l := leftovers(t, live); len(l) != 0 {
				t.Errorf("left next to the live directory: %v", l)
			}
		})
	}
}

func TestHooks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hook    []string
		wantErr string
		check   func(t *testing.T, live string)
	}{
		{
			name: "a hook that changes the new directory",
			hook: []string{"sh", "-c", `test "$MARIPOSA_VOLUME_DIR" = "$(pwd)" && echo restored > marker && chmod 700 . && echo "$RESTORE_ENV" > env`},
			check: func(t *testing.T, live string) {
				if b, _ := os.ReadFile(filepath.Join(live, "marker")); string(b) != "restored\n" {
					t.Errorf("marker: %q", b)
				}
				if b, _ := os.ReadFile(filepath.Join(live, "env")); string(b) != "from the caller\n" {
					t.Errorf("env: %q", b)
				}
			},
		},
		{
			name:    "a hook that fails",
			hook:    []string{"sh", "-c", "echo cannot restore this >&2; exit 3"},
			wantErr: "exit status 3; its output ends with: cannot restore this",
		},
		{
			name:    "a hook that is not there",
			hook:    []string{"/nonexistent/hook"},
			wantErr: "no such file",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandoff(t, nil)
			before := h.existing(t)
			_, err := h.new.Restore(context.Background(), "u", 0, "data", source(h.srv, "u", 0, "data", h.meta), tc.hook, []string{"PATH=" + os.Getenv("PATH"), "RESTORE_ENV=from the caller"}, time.Minute)
			live := h.new.Dir("u", 0, "data")
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrHook) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Restore: %v, want %v with %q", err, ErrHook, tc.wantErr)
				}
				sameState(t, state(t, live), before)
			} else if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, live)
			}
			if l := leftovers(t, live); len(l) != 0 {
				t.Errorf("left next to the live directory: %v", l)
			}
		})
	}
}

func TestHookTimeoutKillsTheGroup(t *testing.T) {
	h := newHandoff(t, nil)
	before := h.existing(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	hook := []string{"sh", "-c", `sleep 60 & echo $! > "$PIDFILE"; sleep 60`}
	start := time.Now()
	_, err := h.new.Restore(context.Background(), "u", 0, "data", source(h.srv, "u", 0, "data", h.meta), hook, append(os.Environ(), "PIDFILE="+pidFile), time.Second)
	took := time.Since(start)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after") || !strings.Contains(err.Error(), "restore_timeout 1s") {
		t.Fatalf("Restore: %v", err)
	}
	if took > 10*time.Second {
		t.Errorf("Restore took %s with a 1s timeout", took)
	}
	live := h.new.Dir("u", 0, "data")
	sameState(t, state(t, live), before)
	if l := leftovers(t, live); len(l) != 0 {
		t.Errorf("left next to the live directory: %v", l)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// The background sleep was in the hook's process group: killed. It is
	// the hook shell's child, reaped by init once the shell is gone.
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil && !zombie(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the hook's background process %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func TestSnapshotHook(t *testing.T) {
	s := newStore(t)
	dir, _ := s.Ensure("u", 0, "data")
	write(t, filepath.Join(dir, "a"), "a", 0o600)
	m, err := s.Snapshot(context.Background(), "u", 0, "data", []string{"sh", "-c", "echo dumped > dump.rdb"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Files != 2 {
		t.Errorf("Files = %d, want 2 (the hook's dump included)", m.Files)
	}
	_, err = s.Snapshot(context.Background(), "u", 0, "data", []string{"false"}, nil)
	if err == nil || !strings.Contains(err.Error(), "hook") {
		t.Fatalf("a failing hook: %v", err)
	}
	// The failed snapshot voided the previous one.
	srv := serve(t, s, allowAll, nil)
	resp, err := http.Get(SnapshotURL(srv.URL, "u", 0, "data", m.SHA256))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("after a failed snapshot: %s, want 404", resp.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := s.Snapshot(ctx, "u", 0, "data", []string{"sleep", "60"}, nil); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a hanging hook: %v", err)
	}
}

func TestSpecialFiles(t *testing.T) {
	s := newStore(t)
	dir, _ := s.Ensure("u", 0, "data")
	write(t, filepath.Join(dir, "a"), "a", 0o600)
	// A socket is skipped.
	l, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m, err := s.Snapshot(context.Background(), "u", 0, "data", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Files != 1 {
		t.Errorf("Files = %d, want 1 (the socket skipped)", m.Files)
	}
	// A named pipe is refused.
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.Snapshot(context.Background(), "u", 0, "data", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "is a named pipe: a volume may hold only regular files, directories and symlinks") {
		t.Errorf("a FIFO: %v", err)
	}
}

func TestAuthorize(t *testing.T) {
	for _, tc := range []struct {
		name      string
		authorize func(*http.Request, string, int) error
		status    int
	}{
		{"allowed", func(r *http.Request, unit string, k int) error {
			if r.Header.Get("X-Session") != "s1" || unit != "u" || k != 0 {
				return errors.New("wrong session")
			}
			return nil
		}, http.StatusOK},
		{"refused", func(*http.Request, string, int) error { return errors.New("does not hold slots/u/0") }, http.StatusForbidden},
		{"no authorize", nil, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := newStore(t)
			dir, _ := old.Ensure("u", 0, "data")
			write(t, filepath.Join(dir, "a"), "a", 0o600)
			m, err := old.Snapshot(context.Background(), "u", 0, "data", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, old, tc.authorize, nil)
			src := source(srv, "u", 0, "data", m)
			src.Header = http.Header{"X-Session": {"s1"}}
			_, err = newStore(t).Restore(context.Background(), "u", 0, "data", src, nil, nil, time.Minute)
			if tc.status == http.StatusOK {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "403") {
				t.Fatalf("Restore: %v, want %v", err, ErrRefused)
			}
			if n := srv.requests.Load(); n != 1 {
				t.Errorf("%d requests: a refusal is not tried again", n)
			}
		})
	}
}

func TestPathTraversal(t *testing.T) {
	s := newStore(t)
	dir, _ := s.Ensure("u", 0, "data")
	write(t, filepath.Join(dir, "a"), "a", 0o600)
	m, err := s.Snapshot(context.Background(), "u", 0, "data", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Dir(s.Root)
	write(t, filepath.Join(outside, "secret"), "secret", 0o600)
	h := s.Handler(allowAll)
	q := "?sha256=" + m.SHA256
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/volumes/u/0/data" + q, 200},
		{"GET", "/v1/volumes/../0/data" + q, 400},
		{"GET", "/v1/volumes/u/0/.." + q, 400},
		{"GET", "/v1/volumes/u/../data" + q, 400},
		{"GET", "/v1/volumes/../../secret" + q, 400},
		{"GET", "/v1/volumes/u/0/../../../secret" + q, 404},
		{"GET", "/v1/volumes//0/data" + q, 400},
		{"GET", "/v1/volumes/u/0/" + q, 400},
		{"GET", "/v1/volumes/u/00/data" + q, 400},
		{"GET", "/v1/volumes/u/-1/data" + q, 400},
		{"GET", "/v1/volumes/u/+0/data" + q, 400},
		{"GET", "/v1/volumes/.snapshots/0/data" + q, 400},
		{"GET", "/v1/volumes/u/0/.copies" + q, 400},
		{"GET", "/v1/volumes/u/0/data.aside" + q, 400},
		{"GET", "/v1/volumes/u/0/data.restore-1" + q, 400},
		{"GET", "/v1/volumes/u%2F0/0/data" + q, 404},
		{"GET", "/v1/volumes/u%2F..%2F0/data" + q, 404},
		{"GET", "/v1/volumes/u/0/a b" + q, 400},
		{"GET", "/v1/volumes/u/0/data/../../../../secret" + q, 404},
		{"GET", "/v1/volumes/u/0/data?sha256=../../x", 400},
		{"GET", "/v1/volumes/u/0/data", 400},
		{"GET", "/v1/volumes/u/0/other" + q, 404},
		{"GET", "/v1/volumes/u/1/data" + q, 404},
		{"GET", "/v1/volumes/u/0/data?sha256=" + strings.Repeat("0", 64), 409},
		{"PUT", "/v1/volumes/u/0/data" + q, 405},
		{"GET", "/v1/volumes/u/0/data/copies" + q, 405},
		{"PUT", "/v1/volumes/../0/data/copies" + q + "&taken_at=2026-01-01T00:00:00Z", 400},
		{"PUT", "/v1/volumes/u/0/../copies" + q + "&taken_at=2026-01-01T00:00:00Z", 400},
		{"PUT", "/v1/volumes/u/0/data/copies" + q + "&taken_at=../../x", 400},
		{"GET", "/v1/volumes/u/0/data/copies/latest", 404},
		{"GET", "/v1/volumes/u/0/data/copies/latest?sha256=../x", 400},
		{"GET", "/v1/volumes/u/0/data/copies/../../secret", 404},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/", strings.NewReader("x"))
			// Set the path as a server would see it decoded, unclean.
			p, query, _ := strings.Cut(tc.path, "?")
			p = strings.ReplaceAll(p, "%2F", "/")
			r.URL.Path, r.URL.RawQuery = p, query
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, w.Code, strings.TrimSpace(w.Body.String()), tc.status)
			}
		})
	}
	// Nothing was written outside the store, nor in it but the volume and
	// its snapshot's record.
	ents, _ := os.ReadDir(outside)
	if len(ents) != 2 {
		t.Errorf("next to the store: %v", ents)
	}
	var files []string
	_ = filepath.WalkDir(s.Root, func(p string, d fs.DirEntry, err error) error {
		if !d.IsDir() {
			rel, _ := filepath.Rel(s.Root, p)
			files = append(files, rel)
		}
		return nil
	})
	if strings.Join(files, " ") != ".snapshots/u/0/data.json u/0/data/a" {
		t.Errorf("files in the store: %v", files)
	}
	// The API's own names.
	for _, tc := range []struct {
		unit string
		k    int
		path string
	}{
		{"..", 0, "data"}, {".", 0, "data"}, {"u", 0, ".."}, {"u", 0, "a/b"}, {"/etc", 0, "data"},
		{"u", -1, "data"}, {"u", 0, "/abs"}, {"a/../..", 0, "data"}, {"u", 0, ""}, {"", 0, "data"},
		{"u", 0, "data.aside"}, {"u", 0, "x.restore-y"}, {".copies", 0, "data"}, {strings.Repeat("u", 201), 0, "data"},
	} {
		if d := s.Dir(tc.unit, tc.k, tc.path); d != "" {
			t.Errorf("Dir(%q, %d, %q) = %q", tc.unit, tc.k, tc.path, d)
		}
		if _, err := s.Ensure(tc.unit, tc.k, tc.path); err == nil {
			t.Errorf("Ensure(%q, %d, %q) accepted", tc.unit, tc.k, tc.path)
		}
		if _, err := s.Restore(context.Background(), tc.unit, tc.k, tc.path, Source{URL: "http://x", SHA256: m.SHA256, Size: m.Size}, nil, nil, 0); err == nil {
			t.Errorf("Restore(%q, %d, %q) accepted", tc.unit, tc.k, tc.path)
		}
	}
	if d := s.Dir("web.v2_a-b", 3, "pg-data.1"); d != filepath.Join(s.Root, "web.v2_a-b", "3", "pg-data.1") {
		t.Errorf("Dir = %q", d)
	}
}

func TestCrashBetweenRenames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		step    string // where the swap "crashes"
		recover string // "open" or "restore"
		want    string // "old" or "new" data in place afterwards
	}{
		{"after the old data was set aside; Open", "aside", "open", "old"},
		{"after the old data was set aside; the next Restore", "aside", "restore", "new"},
		{"after the new data was renamed in; Open", "renamed", "open", "new"},
		{"after the new data was renamed in; the next Restore", "renamed", "restore", "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandoff(t, nil)
			before := h.existing(t)
			live := h.new.Dir("u", 0, "data")
			swapHook = func(step string) error {
				if step == tc.step {
					return errors.New("crash")
				}
				return nil
			}
			_, err := h.restore(t, nil, time.Minute)
			swapHook = nil
			if err == nil {
				t.Fatal("the crash did not happen")
			}
			if _, err := os.Lstat(live + asideSuffix); err != nil {
				t.Fatalf("no aside directory after the crash: %v", err)
			}
			switch tc.recover {
			case "open":
				// A new process: the restore's temporary directory may
				// still be there too.
				if tc.step == "aside" {
					if err := os.Mkdir(live+restoreInfix+"123", 0o700); err != nil {
						t.Fatal(err)
					}
				}
				s, err := Open(h.new.Root, testLogger(t))
				if err != nil {
					t.Fatal(err)
				}
				h.new = s
			case "restore":
				if _, err := h.restore(t, nil, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			want := before
			if tc.want == "new" {
				want = h.want
			}
			sameState(t, state(t, live), want)
			if l := leftovers(t, live); len(l) != 0 {
				t.Errorf("left next to the live directory: %v", l)
			}
		})
	}
}

func TestDirectoryChangedAfterSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"a file grew", func(t *testing.T, dir string) { write(t, filepath.Join(dir, "a.txt"), "hello, and more\n", 0o644) }},
		{"a byte changed", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "a.txt")
			fi, _ := os.Stat(p)
			write(t, p, "jello\n", 0o644)
			_ = setMtime(p, fi.ModTime())
		}},
		{"a file was removed", func(t *testing.T, dir string) { _ = os.Remove(filepath.Join(dir, "empty")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandoff(t, nil)
			tc.change(t, h.old.Dir("u", 0, "data"))
			before := h.existing(t)
			_, err := h.restore(t, nil, time.Minute)
			if err == nil {
				t.Fatal("restored a directory that changed after its snapshot")
			}
			sameState(t, state(t, h.new.Dir("u", 0, "data")), before)
		})
	}
}

func TestCopies(t *testing.T) {
	holder, peer := newStore(t), newStore(t)
	srv := serve(t, peer, allowAll, nil)
	dir, _ := holder.Ensure("u", 2, "data")
	ctx := context.Background()
	var metas []Meta
	for i := range 3 {
		write(t, filepath.Join(dir, "n"), strconv.Itoa(i), 0o600)
		if _, err := holder.SnapshotFile(ctx, "u", 2, "data", nil, nil); err != nil {
			t.Fatal(err)
		}
		m, err := holder.Push(ctx, "u", 2, "data", Peer{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		metas = append(metas, m)
	}
	got, err := peer.Copies("u", 2, "data")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != KeepCopies || got[0].SHA256 != metas[1].SHA256 || got[1].SHA256 != metas[2].SHA256 || !got[1].TakenAt.Equal(metas[2].TakenAt) {
		t.Fatalf("copies kept: %+v, pushed %+v", got, metas)
	}
	cs, _ := peer.copies("u", 2, "data")
	for _, c := range cs {
		if fi, _ := os.Stat(c.name); fi.Mode().Perm() != 0o444 {
			t.Errorf("%s: mode %v, want read-only", c.name, fi.Mode())
		}
	}
	// Unplanned loss: a third node restores the newest copy from the peer.
	third := newStore(t)
	for _, tc := range []struct {
		name string
		url  string
		m    Meta
		err  error
		n    string
	}{
		{"the newest", LatestCopyURL(srv.URL, "u", 2, "data", ""), metas[2], nil, "2"},
		{"the newest with its checksum", LatestCopyURL(srv.URL, "u", 2, "data", metas[2].SHA256), metas[2], nil, "2"},
		{"an older kept copy by its checksum", LatestCopyURL(srv.URL, "u", 2, "data", metas[1].SHA256), metas[1], nil, "1"},
		{"a pruned copy", LatestCopyURL(srv.URL, "u", 2, "data", metas[0].SHA256), metas[0], ErrConflict, ""},
		{"the newest, expecting a pruned one", LatestCopyURL(srv.URL, "u", 2, "data", ""), metas[0], ErrConflict, ""},
		{"another slot", LatestCopyURL(srv.URL, "u", 3, "data", ""), metas[2], ErrNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := third.Restore(ctx, "u", 2, "data", Source{URL: tc.url, SHA256: tc.m.SHA256, Size: tc.m.Size}, nil, nil, time.Minute)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Restore: %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !m.TakenAt.Equal(tc.m.TakenAt) {
				t.Errorf("TakenAt %v, want %v", m.TakenAt, tc.m.TakenAt)
			}
			if b, _ := os.ReadFile(filepath.Join(third.Dir("u", 2, "data"), "n")); string(b) != tc.n {
				t.Errorf("restored %q, want %q", b, tc.n)
			}
		})
	}
	// A copy whose bytes are not its checksum is refused and not kept.
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/volumes/u/2/data/copies?sha256="+metas[0].SHA256+"&taken_at=2030-01-01T00:00:00Z", strings.NewReader("not it"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "checksum mismatch") {
		t.Errorf("a wrong copy: %s %s", resp.Status, b)
	}
	if got2, _ := peer.Copies("u", 2, "data"); len(got2) != 2 || got2[1].SHA256 != metas[2].SHA256 {
		t.Errorf("after a wrong copy: %+v", got2)
	}
	ents, _ := os.ReadDir(peer.copiesPath("u", 2, "data"))
	if len(ents) != 2 {
		t.Errorf("files in the copies' directory: %v", ents)
	}
	// The holder serves its snapshot file too.
	hsrv := serve(t, holder, allowAll, nil)
	if _, err := third.Restore(ctx, "u", 2, "data", Source{URL: SnapshotURL(hsrv.URL, "u", 2, "data", metas[2].SHA256), SHA256: metas[2].SHA256, Size: metas[2].Size}, nil, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRemovesTemporaries(t *testing.T) {
	s := newStore(t)
	for _, p := range []string{
		filepath.Join(s.Root, snapshotsDir, "u", "0", tmpPrefix+"1"),
		filepath.Join(s.Root, copiesDir, "u", "0", "data", incoming+"1"),
	} {
		write(t, p, "partial", 0o600)
	}
	if err := os.MkdirAll(filepath.Join(s.Root, "u", "0", "data"+restoreInfix+"42", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(s.Root, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	var left []string
	_ = filepath.WalkDir(s.Root, func(p string, d fs.DirEntry, err error) error {
		if !d.IsDir() || strings.Contains(d.Name(), restoreInfix) {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("left after Open: %v", left)
	}
}

// genReader is an endless deterministic byte stream.
type genReader struct{ x uint64 }

func (g *genReader) Read(p []byte) (int, error) {
	for i := range p {
		g.x ^= g.x << 13
		g.x ^= g.x >> 7
		g.x ^= g.x << 17
		p[i] = byte(g.x)
	}
	return len(p), nil
}

// bigArchive writes an archive of one file of size bytes, from an endless
// generator through a limited reader, to w.
func bigArchive(w io.Writer, size int64) error {
	a := &archiver{w: countWriter{w: w}}
	if err := a.header(&tarHeaderDir); err != nil {
		return err
	}
	h := tarHeaderFile
	h.Size = size
	if err := a.header(&h); err != nil {
		return err
	}
	if _, err := io.CopyBuffer(writerOnly{&a.w}, io.LimitReader(&genReader{x: 88172645463325252}, size), make([]byte, 64<<10)); err != nil {
		return err
	}
	_, err := a.w.Write(zeroBlocks[:(blockSize-size%blockSize)%blockSize+1024])
	return err
}

func TestRestoreMemoryBounded(t *testing.T) {
	const size = 48 << 20
	h := sha256.New()
	cw := &countWriter{w: h}
	if err := bigArchive(cw, size); err != nil {
		t.Fatal(err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.FormatInt(cw.n, 10))
		_ = bigArchive(w, size)
	}))
	defer srv.Close()
	s := newStore(t)
	s.NoSync = true
	var ms0, ms1 runtimeMem
	ms0.read()
	m, err := s.Restore(context.Background(), "u", 0, "big", Source{URL: srv.URL, SHA256: sum, Size: cw.n}, nil, nil, time.Minute)
	ms1.read()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(s.Dir("u", 0, "big"), "big")); err != nil || fi.Size() != size {
		t.Fatalf("the big file: %v %v", fi, err)
	}
	if alloc := ms1.total - ms0.total; alloc > 16<<20 {
		t.Errorf("a restore of %d MiB allocated %d MiB", size>>20, alloc>>20)
	}
	t.Logf("restore of %d MiB (%s): %d KiB allocated", size>>20, m.SHA256[:12], (ms1.total-ms0.total)>>10)
}

func TestSourceMismatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src      func(h *handoffCase) Source
		err      error
		msg      string
		requests int64
	}{
		{"a smaller published size", func(h *handoffCase) Source {
			src := source(h.srv, "u", 0, "data", h.meta)
			src.Size -= 512
			return src
		}, ErrSize, "announces", 1},
		{"a smaller published size, the stream not announced", func(h *handoffCase) Source {
			src := source(h.srv, "u", 0, "data", h.meta)
			src.Size -= 512
			src.Client = &http.Client{Transport: unannounced{}}
			return src
		}, ErrSize, "more than the", 1},
		{"a larger published size", func(h *handoffCase) Source {
			src := source(h.srv, "u", 0, "data", h.meta)
			src.Size += 512
			return src
		}, ErrSize, "announces", 1},
		{"a larger published size, the stream not announced", func(h *handoffCase) Source {
			src := source(h.srv, "u", 0, "data", h.meta)
			src.Size += 512
			src.Client = &http.Client{Transport: unannounced{}}
			return src
		}, nil, "attempt 3 of 3: truncated stream", 3},
		{"another checksum: the server has another snapshot", func(h *handoffCase) Source {
			src := source(h.srv, "u", 0, "data", h.meta)
			src.SHA256 = strings.Repeat("ab", 32)
			src.URL = SnapshotURL(h.srv.URL, "u", 0, "data", src.SHA256)
			return src
		}, ErrConflict, "409", 1},
		{"another checksum, the server not asked for it", func(h *handoffCase) Source {
			src := source(h.srv, "u", 0, "data", h.meta)
			src.SHA256 = strings.Repeat("ab", 32)
			return src
		}, ErrConflict, "it serves sha256", 1},
		{"a server error", func(h *handoffCase) Source {
			src := source(h.srv, "u", 0, "data", h.meta)
			src.URL = h.srv.URL + "/fail"
			return src
		}, nil, "attempt 3 of 3: 500", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandoff(t, func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/fail" {
						http.Error(w, "broken", http.StatusInternalServerError)
						return
					}
					next.ServeHTTP(w, r)
				})
			})
			before := h.existing(t)
			_, err := h.new.Restore(context.Background(), "u", 0, "data", tc.src(h), nil, nil, time.Minute)
			if err == nil || (tc.err != nil && !errors.Is(err, tc.err)) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Restore: %v, want %v with %q", err, tc.err, tc.msg)
			}
			if n := h.srv.requests.Load(); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			live := h.new.Dir("u", 0, "data")
			sameState(t, state(t, live), before)
			if l := leftovers(t, live); len(l) != 0 {
				t.Errorf("left next to the live directory: %v", l)
			}
		})
	}
}

// unannounced hides the response's length (as a chunked one would).
type unannounced struct{}

func (unannounced) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.ContentLength = -1
	}
	return resp, err
}

func TestSyncEach(t *testing.T) {
	// syncTree's fallback where there is no syncfs.
	root := filepath.Join(t.TempDir(), "new")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	u := &unpacker{root: root}
	src := newReaderSource(bytes.NewReader(tarOf(t, fuzzEntry{typ: '5', name: "d/"}, fuzzEntry{typ: '0', name: "d/f", body: "x"}, fuzzEntry{typ: '0', name: "g", body: "y"})))
	if err := u.run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if len(u.regular) != 2 || len(u.dirs) != 1 {
		t.Fatalf("regular %v, dirs %v", u.regular, u.dirs)
	}
	if err := syncEach(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := syncEach(ctx, u); !errors.Is(err, context.Canceled) {
		t.Errorf("a canceled sync: %v", err)
	}
}
