package proc

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func collect() (*Sink, func() []Line) {
	var mu sync.Mutex
	var lines []Line
	s := NewSink(1024, func(l Line) { mu.Lock(); lines = append(lines, l); mu.Unlock() }, nil)
	return s, func() []Line { mu.Lock(); defer mu.Unlock(); return append([]Line{}, lines...) }
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestExitStatusAndOutput(t *testing.T) {
	sink, lines := collect()
	defer sink.Close()
	p, err := Start(Spec{Argv: []string{"sh", "-c", "echo out; echo err >&2; printf 'no newline'; exit 3"}, Output: sink, Name: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	e := p.Exit()
	if e.Code != 3 || e.Signal != 0 || e.Success() || e.String() != "exit 3" {
		t.Fatalf("exit = %+v (%s)", e, e)
	}
	waitUntil(t, 5*time.Second, func() bool { return len(lines()) == 3 })
	got := map[string]string{}
	for _, l := range lines() {
		if l.Name != "svc" {
			t.Errorf("line name %q", l.Name)
		}
		got[l.Text] = l.Stream
	}
	if got["out"] != "stdout" || got["err"] != "stderr" || got["no newline"] != "stdout" {
		t.Fatalf("lines = %v", got)
	}
}

func TestKilledBySignal(t *testing.T) {
	p, err := Start(Spec{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	if pgid, _ := syscall.Getpgid(p.Pid); pgid != p.Pid {
		t.Fatalf("child pgid %d, want its own pid %d", pgid, p.Pid)
	}
	_ = p.Signal(syscall.SIGKILL)
	if e := p.Exit(); e.Signal != syscall.SIGKILL || e.String() != "killed by SIGKILL" {
		t.Fatalf("exit = %s", e)
	}
}

func TestStartFailure(t *testing.T) {
	if _, err := Start(Spec{Argv: []string{"/nonexistent/program"}}); err == nil {
		t.Fatal("no error starting a missing program")
	}
	if _, err := Start(Spec{}); err == nil {
		t.Fatal("no error for an empty command")
	}
}

// Stop takes the whole group down: grandchildren too, including ones that
// ignore the stop signal.
func TestStopKillsTheGroup(t *testing.T) {
	sink, lines := collect()
	defer sink.Close()
	p, err := Start(Spec{Argv: []string{"sh", "-c", `trap "" TERM; (trap "" TERM; yes | tail >/dev/null) & sleep 3600 & echo $!; wait`}, Output: sink})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, func() bool { return len(lines()) == 1 })
	groupAlive := func() bool { return syscall.Kill(-p.Pid, 0) == nil }
	if !groupAlive() {
		t.Fatal("group not running")
	}
	start := time.Now()
	e := p.Stop(syscall.SIGTERM, 300*time.Millisecond)
	if e.Signal != syscall.SIGKILL {
		t.Errorf("a shell that ignores TERM should die by SIGKILL, got %s", e)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Errorf("SIGKILL came before the timeout")
	}
	waitUntil(t, 5*time.Second, func() bool { return !groupAlive() })
}

// A sink whose writer is stuck never blocks the child: lines are dropped
// and counted, and the child runs to completion.
func TestBlockedSinkDoesNotBlockChild(t *testing.T) {
	release := make(chan struct{})
	var reported sync.WaitGroup
	reported.Add(1)
	var once sync.Once
	var dropped atomic.Int64 // reports keep coming after the first
	s := NewSink(4, func(Line) { <-release }, func(n int64) { dropped.Add(n); once.Do(reported.Done) })
	p, err := Start(Spec{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done"}, Output: s})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("child blocked by a stuck log sink")
	}
	if !p.Exit().Success() {
		t.Fatalf("exit %s", p.Exit())
	}
	waitUntil(t, 5*time.Second, func() bool { return s.Dropped() > 0 })
	close(release)
	reported.Wait()
	if dropped.Load() == 0 {
		t.Fatal("drops not reported")
	}
	s.Close()
}

func TestLongLinesArriveInPieces(t *testing.T) {
	sink, lines := collect()
	defer sink.Close()
	p, err := Start(Spec{Argv: []string{"sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x; echo"}, Output: sink})
	if err != nil {
		t.Fatal(err)
	}
	p.Exit()
	waitUntil(t, 5*time.Second, func() bool {
		n := 0
		for _, l := range lines() {
			n += len(l.Text)
		}
		return n == 200000
	})
	for _, l := range lines() {
		if len(l.Text) > maxLine || strings.Trim(l.Text, "x") != "" {
			t.Fatalf("bad piece of %d bytes", len(l.Text))
		}
	}
}

// The sink's queue keeps lines in order up to its size while the writer is
// busy, drops the rest and says how many, and writes what is queued before
// Close returns.
func TestSinkQueue(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []string
	var reported atomic.Int64
	s := NewSink(8, func(l Line) {
		<-release
		mu.Lock()
		got = append(got, l.Text)
		mu.Unlock()
	}, func(n int64) { reported.Add(n) })
	s.push(Line{Text: "0"})
	waitUntil(t, 5*time.Second, func() bool { return s.queued() == 0 }) // the writer took it
	for i := 1; i <= 20; i++ {
		s.push(Line{Text: strconv.Itoa(i)})
	}
	if d := s.Dropped(); d != 12 {
		t.Fatalf("dropped %d, want 12 (8 queued behind the one being written)", d)
	}
	s.push(Line{Text: "late"}) // dropped too
	go close(release)
	s.Close()
	s.push(Line{Text: "after Close"})
	mu.Lock()
	defer mu.Unlock()
	want := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8"}
	if !slices.Equal(got, want) {
		t.Errorf("written %v, want %v", got, want)
	}
	if r, d := reported.Load(), s.Dropped(); r != 13 || d != 1 {
		t.Errorf("reported %d dropped lines and %d not yet, want 13 and 1 (the line after Close)", r, d)
	}
}

// A burst's queue is let go once it is written: a sink of 4,096 lines holds
// room for what is printed, not for its size.
func TestSinkLetsTheBurstGo(t *testing.T) {
	release := make(chan struct{})
	s := NewSink(4096, func(l Line) {
		if l.Text == "first" {
			<-release
		}
	}, nil)
	defer s.Close()
	s.push(Line{Text: "first"})
	waitUntil(t, 5*time.Second, func() bool { return s.queued() == 0 })
	for range 1000 {
		s.push(Line{Text: "burst"})
	}
	close(release)
	s.Flush(5 * time.Second)
	// The next line is queued and written through the swap of the queue
	// and the written batch: the burst's array must not come back.
	s.push(Line{Text: "one"})
	s.Flush(5 * time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := cap(s.queue); c > keptQueue {
		t.Errorf("the drained queue keeps room for %d lines, want at most %d", c, keptQueue)
	}
}
