package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/logring"
)

// fakeTarget records what it was asked to do.
type fakeTarget struct {
	mu       sync.Mutex
	services []string
	calls    []string
	by       []string
	err      error
}

func (f *fakeTarget) Restart(s, by string) error     { return f.record("restart "+s, by) }
func (f *fakeTarget) ResetFailed(s, by string) error { return f.record("reset "+s, by) }
func (f *fakeTarget) Services() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.services...)
}

func (f *fakeTarget) record(c, by string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	f.by = append(f.by, by)
	return f.err
}

func (f *fakeTarget) Actors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.by...)
}

func (f *fakeTarget) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeTarget) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// syncBuf is a log sink safe for the server's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// sockDir is a short temporary directory: t.TempDir() paths can outgrow
// sun_path.
func sockDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mpc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

type harness struct {
	path   string
	target *fakeTarget
	logs   *logring.Set
	srv    *Server
	log    *syncBuf
	client *Client
	served chan error
}

func start(t *testing.T, path string) *harness {
	t.Helper()
	h := &harness{path: path, target: &fakeTarget{services: []string{"web", "api"}},
		logs: logring.NewSet(100, 1<<20), log: &syncBuf{}, served: make(chan error, 1)}
	lg := hclog.New(&hclog.LoggerOptions{Output: h.log, Level: hclog.Trace, JSONFormat: true})
	srv, err := Listen(path, h.target, h.logs, lg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	h.srv = srv
	go func() { h.served <- srv.Serve() }()
	t.Cleanup(func() { srv.Close() })
	h.client = NewClient(path)
	return h
}

func TestDefaultPath(t *testing.T) {
	cases := []struct {
		euid     int
		xdg, tmp string
		want     string
	}{
		{0, "/run/user/0", "/tmp", "/run/mariposa/mariposa.sock"},
		{1000, "/run/user/1000", "/tmp", "/run/user/1000/mariposa/mariposa.sock"},
		{1000, "", "/tmp", "/tmp/mariposa-1000/mariposa.sock"},
		{1000, "relative", "/var/tmp", "/var/tmp/mariposa-1000/mariposa.sock"},
	}
	for _, c := range cases {
		if got := defaultPath(c.euid, c.xdg, c.tmp); got != c.want {
			t.Errorf("defaultPath(%d, %q, %q) = %q, want %q", c.euid, c.xdg, c.tmp, got, c.want)
		}
	}
}

func TestResolvePath(t *testing.T) {
	t.Setenv(EnvSocket, "/env/m.sock")
	if got := ResolvePath("/flag/m.sock"); got != "/flag/m.sock" {
		t.Errorf("flag: %q", got)
	}
	if got := ResolvePath(""); got != "/env/m.sock" {
		t.Errorf("env: %q", got)
	}
	t.Setenv(EnvSocket, "")
	if got := ResolvePath(""); got != DefaultPath() {
		t.Errorf("default: %q", got)
	}
}

func TestListenCreatesPrivateSocketAndRemovesIt(t *testing.T) {
	dir := filepath.Join(sockDir(t), "sub", "run")
	path := filepath.Join(dir, "m.sock")
	h := start(t, path)
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a socket 0600", fi.Mode())
	}
	di, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, want 0700", di.Mode().Perm())
	}
	// No temporary name left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Fatalf("left %s", e.Name())
		}
	}
	if err := h.client.Restart(context.Background(), "web"); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after Close: %v", err)
	}
	// A new server can take the path at once.
	start(t, path)
}

func TestListenRefusesBadPaths(t *testing.T) {
	d := sockDir(t)
	file := filepath.Join(d, "plain")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, want string
	}{
		{"empty", "", "empty"},
		{"too long", "/" + strings.Repeat("x", 120) + "/m.sock", "at most 107"},
		{"not a socket", file, "is not a socket"},
		{"dir is a file", filepath.Join(file, "m.sock"), "not a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Listen(c.path, &fakeTarget{}, logring.NewSet(1, 1), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Fatal("the file was changed")
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(sockDir(t), "m.sock")
	// What a killed mariposa leaves: a socket file nobody listens on.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	h := start(t, path)
	if err := h.client.Restart(context.Background(), "web"); err != nil {
		t.Fatalf("after replacing the stale socket: %v", err)
	}
	if !strings.Contains(h.log.String(), "replacing a stale control socket") {
		t.Errorf("log does not say the socket was replaced:\n%s", h.log.String())
	}
}

func TestListenNeverStealsALiveSocket(t *testing.T) {
	t.Run("another mariposa", func(t *testing.T) {
		path := filepath.Join(sockDir(t), "m.sock")
		h := start(t, path)
		_, err := Listen(path, &fakeTarget{}, logring.NewSet(1, 1), nil)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprint("pid ", os.Getpid())) {
			t.Fatalf("err = %v, want one naming %s and pid %d", err, path, os.Getpid())
		}
		if err := h.client.Restart(context.Background(), "web"); err != nil {
			t.Fatalf("first server lost its socket: %v", err)
		}
	})
	t.Run("any process answering", func(t *testing.T) {
		path := filepath.Join(sockDir(t), "m.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = Listen(path, &fakeTarget{}, logring.NewSet(1, 1), nil)
		if err == nil || !strings.Contains(err.Error(), "already answers") || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v", err)
		}
		if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Fatalf("the live socket was touched: %v", err)
		}
	})
}

func TestListenRefusesForeignDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		consultest.Require(t, false, "needs root to give a directory to another user")
	}
	dir := filepath.Join(sockDir(t), "theirs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(filepath.Join(dir, "m.sock"), &fakeTarget{}, logring.NewSet(1, 1), nil)
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("err = %v", err)
	}
}

func TestActions(t *testing.T) {
	h := start(t, filepath.Join(sockDir(t), "m.sock"))
	ctx := context.Background()
	if err := h.client.Restart(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Reset(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if got := h.target.Calls(); !slices.Equal(got, []string{"restart web", "reset api"}) {
		t.Fatalf("calls %q", got)
	}
	// The supervisor is told who asked: the caller's uid and pid.
	me := fmt.Sprintf("socket uid=%d pid=%d", os.Geteuid(), os.Getpid())
	if got := h.target.Actors(); !slices.Equal(got, []string{me, me}) {
		t.Fatalf("actors %q, want %q", got, me)
	}
	names, err := h.client.Services(ctx)
	if err != nil || !slices.Equal(names, []string{"api", "web"}) {
		t.Fatalf("services %q %v", names, err)
	}

	var ae *APIError
	for _, svc := range []string{"nope", "a/b", "../web"} {
		err = h.client.Restart(ctx, svc)
		want := fmt.Sprintf("no service %q on this node (services: api, web)", svc)
		if !errors.As(err, &ae) || !ae.NotFound() || ae.Message != want {
			t.Fatalf("restart %q: err = %v, want 404 %q", svc, err, want)
		}
	}
	if got := h.target.Calls(); len(got) != 2 {
		t.Fatalf("an unknown service reached the target: %q", got)
	}

	h.target.setErr(errors.New("web is waiting for its dependencies"))
	err = h.client.Reset(ctx, "web")
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Message != "web is waiting for its dependencies" {
		t.Fatalf("err = %v", err)
	}
	h.target.setErr(fmt.Errorf("gone: %w", ErrNoService))
	err = h.client.Restart(ctx, "web")
	if !errors.As(err, &ae) || !ae.NotFound() {
		t.Fatalf("err = %v", err)
	}

	// The wrong method changes nothing.
	resp, err := h.client.hc.Get("http://mariposa/v1/restart/web")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET restart: %s", resp.Status)
	}
	if n := len(h.target.Calls()); n != 4 {
		t.Fatalf("%d calls, want 4", n)
	}

	// Every request is audited with the caller's credentials.
	var audits []string
	for _, e := range h.logEntries(t) {
		if e["action"] == nil {
			continue
		}
		if e["@module"] != "control" || e["uid"] != float64(os.Getuid()) || e["pid"] != float64(os.Getpid()) {
			t.Errorf("audit entry without the caller: %v", e)
		}
		audits = append(audits, fmt.Sprint(e["action"], " ", e["service"]))
	}
	want := []string{"restart web", "reset api", "restart nope", "restart a/b", "restart ../web", "reset web", "restart web"}
	if !slices.Equal(audits, want) {
		t.Errorf("audited %q, want %q", audits, want)
	}
}

func (h *harness) logEntries(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(h.log.String()), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

func TestNotRunning(t *testing.T) {
	d := sockDir(t)
	stale := filepath.Join(d, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	for _, path := range []string{filepath.Join(d, "missing.sock"), filepath.Join(d, "nodir", "m.sock"), stale} {
		c := NewClient(path)
		err := c.Restart(context.Background(), "web")
		var nr *NotRunningError
		want := fmt.Sprintf("no mariposa is running here (no control socket at %s); is `mariposa run` running as another user?", path)
		if !errors.As(err, &nr) || err.Error() != want {
			t.Errorf("%s: err = %v", path, err)
		}
		err = c.Logs(context.Background(), "web", LogsOptions{N: 5}, func(LogEntry) error { return nil })
		if !errors.As(err, &nr) {
			t.Errorf("%s: logs err = %v", path, err)
		}
	}
}

func collect(t *testing.T, c *Client, svc string, o LogsOptions) []LogEntry {
	t.Helper()
	var got []LogEntry
	if err := c.Logs(context.Background(), svc, o, func(e LogEntry) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestLogs(t *testing.T) {
	h := start(t, filepath.Join(sockDir(t), "m.sock"))
	r := h.logs.Get("web")
	for i := 0; i < 150; i++ {
		stream := "stdout"
		if i%10 == 0 {
			stream = "stderr"
		}
		r.Add(logring.Line{Stream: stream, Text: fmt.Sprint("line ", i)})
	}
	got := collect(t, h.client, "web", LogsOptions{N: -1})
	if len(got) != 100 || got[0].Text != "line 50" || got[99].Text != "line 149" {
		t.Fatalf("default: %d lines, first %+v", len(got), got[0])
	}
	if got[0].Stream != "stderr" || got[1].Stream != "stdout" || got[0].Time.IsZero() {
		t.Fatalf("streams/time: %+v %+v", got[0], got[1])
	}
	if got := collect(t, h.client, "web", LogsOptions{N: 3}); len(got) != 3 || got[2].Text != "line 149" {
		t.Fatalf("n=3: %+v", got)
	}
	if got := collect(t, h.client, "web", LogsOptions{N: 0}); len(got) != 0 {
		t.Fatalf("n=0: %+v", got)
	}
	// A known service with no output yet: no lines, no error.
	if got := collect(t, h.client, "api", LogsOptions{N: 10}); len(got) != 0 {
		t.Fatalf("api: %+v", got)
	}
	var ae *APIError
	err := h.client.Logs(context.Background(), "nope", LogsOptions{N: 1}, func(LogEntry) error { return nil })
	if !errors.As(err, &ae) || !ae.NotFound() || !strings.Contains(ae.Message, `no service "nope" on this node`) {
		t.Fatalf("err = %v", err)
	}

	// Bad parameters are refused; text format is readable.
	for q, code := range map[string]int{"n=-1": 400, "n=x": 400, "follow=maybe": 400, "format=xml": 400, "n=2&format=text": 200} {
		resp, err := h.client.hc.Get("http://mariposa/v1/logs/web?" + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("%s: %s %s", q, resp.Status, b)
		}
		if code == 200 && !strings.HasSuffix(string(b), " stdout line 149\n") {
			t.Errorf("text: %q", b)
		}
	}
}

func TestLogsFollow(t *testing.T) {
	h := start(t, filepath.Join(sockDir(t), "m.sock"))
	r := h.logs.Get("web")
	r.Add(logring.Line{Stream: "stdout", Text: "before"})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := make(chan LogEntry, 100)
	done := make(chan error, 1)
	go func() {
		done <- h.client.Logs(ctx, "web", LogsOptions{N: 5, Follow: true}, func(e LogEntry) error {
			lines <- e
			return nil
		})
	}()
	next := func() LogEntry {
		t.Helper()
		select {
		case e := <-lines:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no line within 10s")
			return LogEntry{}
		}
	}
	if e := next(); e.Text != "before" {
		t.Fatalf("backlog: %+v", e)
	}
	// The backlog arrived, so the follower is subscribed: new lines stream.
	r.Add(logring.Line{Stream: "stderr", Text: "after"})
	if e := next(); e.Text != "after" || e.Stream != "stderr" {
		t.Fatalf("followed: %+v", e)
	}
	// The caller going away ends the stream on both sides.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Logs after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Logs did not return after cancel")
	}
	waitFollowers(t, r, 0)
}

func waitFollowers(t *testing.T, r *logring.Ring, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.Followers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("ring has %d followers, want %d", r.Followers(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLogsFollowEndsOnCloseAndRemove(t *testing.T) {
	h := start(t, filepath.Join(sockDir(t), "m.sock"))
	follow := func(svc string) chan error {
		got := make(chan LogEntry, 10)
		done := make(chan error, 1)
		go func() {
			done <- h.client.Logs(context.Background(), svc, LogsOptions{N: 0, Follow: true}, func(e LogEntry) error {
				got <- e
				return nil
			})
		}()
		// Wait until subscribed: a line added now arrives.
		deadline := time.Now().Add(10 * time.Second)
		for {
			h.logs.Get(svc).Add(logring.Line{Stream: "stdout", Text: "ping"})
			select {
			case <-got:
				return done
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("follower never subscribed")
			}
		}
	}
	wait := func(done chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("follow did not end on %s", what)
		}
	}
	d := follow("web")
	h.logs.Remove("web")
	wait(d, "Remove")

	d = follow("api")
	start := time.Now()
	if err := h.srv.Close(); err != nil {
		t.Fatal(err)
	}
	wait(d, "Close")
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("Close waited %v for a follower", el)
	}
}

func TestLogsFollowTellsDrops(t *testing.T) {
	h := start(t, filepath.Join(sockDir(t), "m.sock"))
	r := h.logs.Get("web")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	first := make(chan struct{})
	var mu sync.Mutex
	var got []LogEntry
	done := make(chan error, 1)
	go func() {
		done <- h.client.Logs(ctx, "web", LogsOptions{N: 0, Follow: true}, func(e LogEntry) error {
			mu.Lock()
			got = append(got, e)
			n := len(got)
			mu.Unlock()
			if n == 1 {
				close(first)
				<-release // a stuck reader: the socket fills, then the follower's queue
			}
			return nil
		})
	}()
	waitFollowers(t, r, 1)
	r.Add(logring.Line{Stream: "stdout", Text: "first"})
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("first line never arrived")
	}
	// Far more than the socket buffers and the follower's queue hold; Add
	// must not wait for the reader.
	big := strings.Repeat("y", 3000)
	for i := 0; i < 5000; i++ {
		r.Add(logring.Line{Stream: "stdout", Text: big})
	}
	close(release)
	// Numbered tail lines until one arrives: it carries the count of every
	// drop before it.
	deadline := time.Now().Add(20 * time.Second)
	for k := 0; ; k++ {
		r.Add(logring.Line{Stream: "stdout", Text: fmt.Sprint("tail-", k)})
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		var dropped, lines int64
		seen := -1
		for _, e := range got {
			dropped += e.Dropped
			if e.Stream != "" {
				lines++
			}
			if strings.HasPrefix(e.Text, "tail-") {
				fmt.Sscanf(e.Text, "tail-%d", &seen)
				break
			}
		}
		mu.Unlock()
		if seen >= 0 {
			// Every line up to it was delivered or counted as dropped, and
			// some were dropped.
			if want := int64(1 + 5000 + seen + 1); dropped == 0 || lines+dropped != want {
				t.Fatalf("%d lines + %d dropped, want %d with some dropped", lines, dropped, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no tail line arrived")
		}
	}
}

// The server turns away callers of another uid even when the socket's mode
// would let them in.
func TestPeerOfAnotherUserRefused(t *testing.T) {
	if os.Getenv("CONTROL_TEST_DIAL") != "" {
		return
	}
	if os.Geteuid() != 0 {
		consultest.Require(t, false, "needs root to run a client as another user")
	}
	d := sockDir(t)
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, "m.sock")
	h := start(t, path)
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	// A copy the other user can execute: the build directory is private.
	bin := filepath.Join(d, "helper.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^TestPeerDialHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "CONTROL_TEST_DIAL="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "REFUSED") {
		t.Fatalf("another user got an answer:\n%s", out)
	}
	if len(h.target.Calls()) != 0 {
		t.Fatalf("another user's request reached the target: %q", h.target.Calls())
	}
	refused := false
	for _, e := range h.logEntries(t) {
		refused = refused || e["uid"] == float64(65534)
	}
	if !refused {
		t.Errorf("refusal not logged:\n%s", h.log.String())
	}
}

func TestPeerDialHelper(t *testing.T) {
	path := os.Getenv("CONTROL_TEST_DIAL")
	if path == "" {
		return // only a helper process of TestPeerOfAnotherUserRefused
	}
	err := NewClient(path).Restart(context.Background(), "web")
	if err == nil {
		fmt.Println("ANSWERED")
		return
	}
	fmt.Println("REFUSED:", err)
}

// TestResolve: a name is an instance of the node, or a unit of which the
// node holds exactly one slot; else the message names what the node has.
func TestResolve(t *testing.T) {
	node := []string{"web", "api/0", "db/1", "db/2", "apiary"}
	for _, c := range []struct {
		name, key, msg string
	}{
		{"web", "web", ""},
		{"api/0", "api/0", ""},
		{"api", "api/0", ""},
		{"db/2", "db/2", ""},
		{"db", "", `this node holds 2 slots of "db": name one (db/1, db/2)`},
		{"ap", "", `no service "ap" on this node (services: api/0, apiary, db/1, db/2, web)`},
		{"api/1", "", `no service "api/1" on this node (services: api/0, apiary, db/1, db/2, web)`},
	} {
		key, msg, ok := Resolve(c.name, node)
		if key != c.key || msg != c.msg || ok != (c.key != "") {
			t.Errorf("Resolve(%q) = %q, %q, %v; want %q, %q", c.name, key, msg, ok, c.key, c.msg)
		}
	}
	if _, msg, _ := Resolve("x", nil); msg != `no service "x" on this node (services: none)` {
		t.Errorf("no services: %q", msg)
	}
}
