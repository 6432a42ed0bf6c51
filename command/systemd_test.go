package command

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// notifySocket listens where NOTIFY_SOCKET points for this test.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	dir, err := os.MkdirTemp("", "mnotify") // a socket path has a 108-byte limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", p)
	return conn
}

func TestNotifyReady(t *testing.T) {
	conn := notifySocket(t)
	registered, stop := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() { notifyReady(hclog.NewNullLogger(), registered, stop); close(done) }()

	// Nothing before the services are registered.
	conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 512)
	if n, err := conn.Read(buf); err == nil {
		t.Fatalf("notified %q before registration", buf[:n])
	}
	close(registered)
	<-done
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "READY=1\nSTATUS=services registered; supervising" {
		t.Errorf("notification = %q", got)
	}

	// Stopping before registration: no READY=1.
	done = make(chan struct{})
	stop2 := make(chan struct{})
	go func() { notifyReady(hclog.NewNullLogger(), make(chan struct{}), stop2); close(done) }()
	close(stop2)
	<-done
	notifyStopping(hclog.NewNullLogger())
	n, err = conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "STOPPING=1\nSTATUS=stopping the services" {
		t.Errorf("notification = %q", got)
	}
}

// Without NOTIFY_SOCKET (not under systemd) nothing is sent and nothing
// fails: no warning is logged. A NOTIFY_SOCKET that nobody listens on is a
// failure, and says so (the contrast that shows the first case is checked).
func TestNotifyWithoutSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	os.Unsetenv("NOTIFY_SOCKET")
	var logged strings.Builder
	log := hclog.New(&hclog.LoggerOptions{Output: &logged, Level: hclog.Warn})
	registered := make(chan struct{})
	close(registered)
	if !notifyReady(log, registered, make(chan struct{})) {
		t.Fatal("notifyReady: not ready once registered")
	}
	for _, state := range []string{"READY=1", "STOPPING=1"} {
		if sent, err := sdNotify(log, state); sent || err != nil {
			t.Fatalf("sdNotify(%q) without NOTIFY_SOCKET: sent %v, err %v; want nothing sent and no error", state, sent, err)
		}
	}
	notifyStopping(log)
	if logged.Len() != 0 {
		t.Fatalf("warnings without systemd: %q", logged.String())
	}

	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody"))
	if sent, err := sdNotify(log, "READY=1"); sent || err == nil {
		t.Fatalf("sdNotify to a socket nobody listens on: sent %v, err %v; want an error", sent, err)
	}
	if logged.Len() == 0 {
		t.Fatal("a failed notification logged no warning")
	}
}

// The start's memory goes back once the services are registered, once, and
// again once the node has settled; not when mariposa stops before either.
func TestAfterRegistrationReleasesMemory(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	var start, settled int
	oldStart, oldSettled, oldDelay := releaseStartMemory, releaseSettledMemory, settleDelay
	releaseStartMemory = func() { start++ }
	releaseSettledMemory = func(hclog.Logger) { settled++ }
	t.Cleanup(func() { releaseStartMemory, releaseSettledMemory, settleDelay = oldStart, oldSettled, oldDelay })

	stop := make(chan struct{})
	close(stop)
	afterRegistration(hclog.NewNullLogger(), make(chan struct{}), stop)
	if start != 0 || settled != 0 {
		t.Fatalf("released %d and %d times when stopped before registration; want 0 and 0", start, settled)
	}
	registered := make(chan struct{})
	close(registered)
	// Stopped after the registration, before the node settled.
	settleDelay = time.Hour
	released := make(chan struct{})
	releaseStartMemory = func() { start++; close(released) }
	stop = make(chan struct{})
	done := make(chan struct{})
	go func() { afterRegistration(hclog.NewNullLogger(), registered, stop); close(done) }()
	<-released
	close(stop)
	<-done
	if start != 1 || settled != 0 {
		t.Fatalf("released %d and %d times when stopped once registered; want 1 and 0", start, settled)
	}
	releaseStartMemory = func() { start++ }
	settleDelay = time.Millisecond
	afterRegistration(hclog.NewNullLogger(), registered, make(chan struct{}))
	if start != 2 || settled != 1 {
		t.Fatalf("released %d and %d times once registered and settled; want 2 and 1", start, settled)
	}
}
