//go:build linux

package proc

import (
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Idle children cost the supervisor no goroutine each: one poller follows
// every child's output and exit.
func TestIdleChildrenCostNoGoroutines(t *testing.T) {
	sink, _ := collect()
	defer sink.Close()
	// The poller's own goroutine starts with the first child.
	first, err := Start(Spec{Argv: []string{"true"}, Output: sink})
	if err != nil {
		t.Fatal(err)
	}
	first.Exit()
	<-first.OutputDone()
	before := runtime.NumGoroutine()
	var ps []*Process
	for i := 0; i < 50; i++ {
		p, err := Start(Spec{Argv: []string{"sleep", "60"}, Output: sink, Name: "idle"})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	during := runtime.NumGoroutine()
	for _, p := range ps {
		_ = p.Signal(syscall.SIGKILL)
	}
	for _, p := range ps {
		if e := p.Exit(); e.Signal != syscall.SIGKILL {
			t.Fatalf("pid %d: %s", p.Pid, e)
		}
		select {
		case <-p.OutputDone():
		case <-time.After(5 * time.Second):
			t.Fatalf("pid %d: output not done", p.Pid)
		}
	}
	if during-before > 5 {
		t.Fatalf("50 idle children took %d more goroutines", during-before)
	}
}

// A line written in parts arrives whole; a line of exactly maxLine bytes
// in one piece, the next one after it.
func TestLinesAcrossWrites(t *testing.T) {
	sink, lines := collect()
	defer sink.Close()
	p, err := Start(Spec{Argv: []string{"sh", "-c", "printf 'one '; sleep 0.2; printf 'line\\nnext'; sleep 0.2; printf ' line\\n'; head -c 65536 /dev/zero | tr '\\0' y; printf '\\nz\\n'"}, Output: sink})
	if err != nil {
		t.Fatal(err)
	}
	p.Exit()
	<-p.OutputDone()
	waitUntil(t, 5*time.Second, func() bool { return len(lines()) == 4 })
	got := lines()
	if got[0].Text != "one line" || got[1].Text != "next line" || got[2].Text != strings.Repeat("y", maxLine) || got[3].Text != "z" {
		t.Fatalf("lines: %q, %q, %d bytes, %q", got[0].Text, got[1].Text, len(got[2].Text), got[3].Text)
	}
}

// Without Go's netpoller (should it ever refuse the epoll descriptor) the
// poller blocks a thread in epoll_wait and still works; the descriptor
// stays open though nothing but the poller refers to its *os.File.
func TestPollerWithoutNetpoller(t *testing.T) {
	p, _, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	go p.run(nil) // never returns; a thread stays in epoll_wait
	// A finalizer closing the descriptor would run now: collect, and wait
	// until a sentinel's finalizer, queued after it, has run.
	for range 2 {
		ran := make(chan struct{})
		sentinel := new([64]byte)
		runtime.SetFinalizer(sentinel, func(*[64]byte) { close(ran) })
		sentinel = nil
		runtime.GC()
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("finalizers did not run")
		}
	}
	r, w, err := newPipe()
	if err != nil {
		t.Fatal(err)
	}
	sink, lines := collect()
	defer sink.Close()
	eof := make(chan struct{})
	s := &stream{sink: sink, name: "svc", kind: "stdout"}
	if !p.add([]int{r}, []func(){func() { p.readStream(r, s, func() { close(eof) }) }}) {
		t.Fatal("not registered")
	}
	w.Write([]byte("one\ntwo"))
	w.Close()
	select {
	case <-eof:
	case <-time.After(5 * time.Second):
		t.Fatal("no EOF")
	}
	waitUntil(t, 5*time.Second, func() bool { return len(lines()) == 2 })
	if got := lines(); got[0].Text != "one" || got[1].Text != "two" {
		t.Fatalf("lines %q %q", got[0].Text, got[1].Text)
	}
}
