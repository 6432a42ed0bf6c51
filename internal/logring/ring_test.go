package logring

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func texts(ls []Line) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Text
	}
	return out
}

func add(r *Ring, stream string, texts ...string) {
	for _, t := range texts {
		r.Add(Line{Stream: stream, Text: t})
	}
}

func TestRingBounds(t *testing.T) {
	cases := []struct {
		name               string
		maxLines, maxBytes int
		add                []string
		last               int
		want               []string
	}{
		{"empty", 10, 1 << 10, nil, 5, nil},
		{"fewer than n", 10, 1 << 10, []string{"a", "b"}, 5, []string{"a", "b"}},
		{"n zero", 10, 1 << 10, []string{"a", "b"}, 0, nil},
		{"n negative", 10, 1 << 10, []string{"a"}, -1, nil},
		{"line bound drops oldest", 3, 1 << 10, []string{"a", "b", "c", "d", "e"}, 10, []string{"c", "d", "e"}},
		{"last n of kept", 3, 1 << 10, []string{"a", "b", "c", "d", "e"}, 2, []string{"d", "e"}},
		// Each line costs its text plus lineOverhead: 3 lines of 10 bytes fit in 3*(10+48).
		{"byte bound drops oldest", 100, 3 * (10 + lineOverhead),
			[]string{"0123456789", "1123456789", "2123456789", "3123456789"}, 10,
			[]string{"1123456789", "2123456789", "3123456789"}},
		{"grows past the first chunk", 40, 1 << 20, seq(35), 100, seq(35)},
		{"wraps after growing", 20, 1 << 20, seq(50), 100, seq(50)[30:]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := New(tc.maxLines, tc.maxBytes)
			add(r, "stdout", tc.add...)
			got := texts(r.Last(tc.last))
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("Last(%d) = %q, want %q", tc.last, got, tc.want)
			}
			if r.bytes > tc.maxBytes || r.n > tc.maxLines || len(r.buf) > tc.maxLines {
				t.Fatalf("bounds exceeded: bytes %d/%d lines %d/%d buf %d", r.bytes, tc.maxBytes, r.n, tc.maxLines, len(r.buf))
			}
		})
	}
}

func seq(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}

func TestRingLazyAndBoundedMemory(t *testing.T) {
	s := NewSet(DefaultMaxLines, DefaultMaxBytes)
	for i := 0; i < 1000; i++ {
		s.Get(fmt.Sprint("svc", i))
	}
	r, _ := s.Lookup("svc7")
	if r.buf != nil {
		t.Fatalf("an idle ring allocated %d slots", len(r.buf))
	}
	r.Add(Line{Text: "x"})
	if len(r.buf) != 16 {
		t.Fatalf("first Add allocated %d slots, want 16", len(r.buf))
	}
	// A flood stays within the line bound and the byte bound.
	long := strings.Repeat("y", 500)
	for i := 0; i < 10*DefaultMaxLines; i++ {
		r.Add(Line{Text: long})
	}
	if len(r.buf) > DefaultMaxLines || r.bytes > DefaultMaxBytes {
		t.Fatalf("buf %d slots, %d bytes", len(r.buf), r.bytes)
	}
	if want := DefaultMaxBytes / (500 + lineOverhead); r.Len() != want {
		t.Fatalf("kept %d lines, want %d", r.Len(), want)
	}
}

func TestLongLinesCut(t *testing.T) {
	r := New(10, 1<<20)
	r.Add(Line{Text: strings.Repeat("é", MaxLineBytes)}) // 2 bytes a rune
	got := r.Last(1)[0].Text
	if len(got) > MaxLineBytes || !strings.HasSuffix(got, cutMark) || !utf8.ValidString(got) {
		t.Fatalf("cut line: %d bytes, suffix %q, valid %v", len(got), got[len(got)-10:], utf8.ValidString(got))
	}
	// A ring smaller than a line cuts to fit in it.
	small := New(10, lineOverhead+20)
	small.Add(Line{Text: strings.Repeat("z", 100)})
	if got := small.Last(1)[0].Text; len(got) > 20 || !strings.HasSuffix(got, cutMark) {
		t.Fatalf("small ring kept %q", got)
	}
	// Tiny bounds never panic.
	tiny := New(0, 0)
	tiny.Add(Line{Text: "hello"})
	if tiny.Len() != 1 || len(tiny.Last(1)[0].Text) > 1 {
		t.Fatalf("tiny ring: %d lines %q", tiny.Len(), texts(tiny.Last(1)))
	}
}

func TestLastStderrOutlivesRing(t *testing.T) {
	r := New(3, 1<<10)
	if _, ok := r.LastStderr(); ok {
		t.Fatal("LastStderr on an empty ring")
	}
	add(r, "stderr", "boom")
	add(r, "stdout", "a", "b", "c", "d")
	l, ok := r.LastStderr()
	if !ok || l.Text != "boom" || l.Stream != "stderr" || l.Time.IsZero() {
		t.Fatalf("LastStderr = %+v, %v", l, ok)
	}
	for _, got := range r.Last(10) {
		if got.Text == "boom" {
			t.Fatal("boom still in the ring; the test proves nothing")
		}
	}
	add(r, "stderr", "bang")
	if l, _ := r.LastStderr(); l.Text != "bang" {
		t.Fatalf("LastStderr = %q, want bang", l.Text)
	}
}

func recv(t *testing.T, f *Follower) (Event, bool) {
	t.Helper()
	select {
	case e, ok := <-f.C():
		return e, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no line within 10s")
		return Event{}, false
	}
}

func TestFollowNoGapNoRepeat(t *testing.T) {
	r := New(100, 1<<20)
	add(r, "stdout", "a", "b", "c")
	backlog, f := r.Follow(context.Background(), 2, 8)
	defer f.Close()
	add(r, "stderr", "d")
	if got := texts(backlog); strings.Join(got, ",") != "b,c" {
		t.Fatalf("backlog %q", got)
	}
	if l, ok := recv(t, f); !ok || l.Text != "d" || l.Stream != "stderr" {
		t.Fatalf("got %+v %v", l, ok)
	}
	f.Close()
	f.Close() // idempotent
	if _, ok := recv(t, f); ok {
		t.Fatal("channel open after Close")
	}
	add(r, "stdout", "e") // no send on the closed follower
}

func TestSlowFollowerDropsAndIsTold(t *testing.T) {
	r := New(100, 1<<20)
	_, f := r.Follow(context.Background(), 0, 2)
	defer f.Close()
	done := make(chan struct{})
	go func() {
		add(r, "stdout", seq(10)...) // must not block on the unread follower
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Add blocked on a slow follower")
	}
	// The gap is told where it is: after the queued lines, before the
	// next one that finds room.
	for _, want := range []Event{{Line: Line{Text: "0"}}, {Line: Line{Text: "1"}}} {
		if e, _ := recv(t, f); e.Text != want.Text || e.Dropped != 0 {
			t.Fatalf("got %q dropped %d, want %q", e.Text, e.Dropped, want.Text)
		}
	}
	add(r, "stdout", "10")
	if e, _ := recv(t, f); e.Text != "10" || e.Dropped != 8 {
		t.Fatalf("got %q dropped %d, want \"10\" after 8 dropped", e.Text, e.Dropped)
	}
	add(r, "stdout", "11", "12", "13")
	f.Close()
	if n := f.Dropped(); n != 1 {
		t.Fatalf("Dropped after close = %d, want 1", n)
	}
	if n := f.Dropped(); n != 0 {
		t.Fatalf("Dropped did not reset: %d", n)
	}
}

func TestFollowEnds(t *testing.T) {
	t.Run("context", func(t *testing.T) {
		r := New(10, 1<<10)
		ctx, cancel := context.WithCancel(context.Background())
		_, f := r.Follow(ctx, 0, 4)
		cancel()
		if _, ok := recv(t, f); ok {
			t.Fatal("line after cancel")
		}
		f.Close()
	})
	t.Run("remove", func(t *testing.T) {
		s := NewSet(10, 1<<10)
		_, f := s.Get("web").Follow(context.Background(), 0, 4)
		s.Remove("web")
		if _, ok := recv(t, f); ok {
			t.Fatal("line after Remove")
		}
		if _, ok := s.Lookup("web"); ok {
			t.Fatal("ring still in the set")
		}
		// A closed ring hands out closed followers.
		r := New(10, 1<<10)
		r.Add(Line{Text: "kept"})
		r.Close()
		b, f2 := r.Follow(context.Background(), 5, 4)
		if _, ok := recv(t, f2); ok || len(b) != 1 {
			t.Fatalf("closed ring: backlog %d, channel open %v", len(b), ok)
		}
	})
}

func TestSetGetCreatesOnce(t *testing.T) {
	s := NewSet(10, 1<<10)
	if _, ok := s.Lookup("a"); ok {
		t.Fatal("Lookup created a ring")
	}
	if first, second := s.Get("a"), s.Get("a"); first != second {
		t.Fatal("Get created two rings")
	}
	s.Add("a", Line{Text: "x"})
	if got := texts(s.Get("a").Last(1)); len(got) != 1 || got[0] != "x" {
		t.Fatalf("got %q", got)
	}
	s.Remove("nope") // no panic
}

// Run with -race: writers, readers, followers and removals at once.
func TestConcurrent(t *testing.T) {
	s := NewSet(50, 4<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	names := []string{"a", "b", "c"}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				stream := "stdout"
				if i%7 == 0 {
					stream = "stderr"
				}
				s.Add(names[i%len(names)], Line{Stream: stream, Text: strings.Repeat("x", i%300)})
			}
		}(w)
	}
	for rd := 0; rd < 3; rd++ {
		wg.Add(1)
		go func(rd int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				r := s.Get(names[rd])
				_ = r.Last(20)
				_, _ = r.LastStderr()
				fctx, fcancel := context.WithCancel(ctx)
				_, f := r.Follow(fctx, 5, 4)
				for j := 0; j < 3; j++ {
					select {
					case <-f.C():
					default:
					}
				}
				_ = f.Dropped()
				if i%2 == 0 {
					fcancel()
				} else {
					f.Close()
				}
				fcancel()
				if i%50 == 0 {
					s.Remove(names[rd])
				}
			}
		}(rd)
	}
	wg.Wait()
	for _, n := range names {
		r := s.Get(n)
		r.mu.Lock()
		if r.n > 50 || r.bytes > 4<<10 {
			t.Errorf("%s: %d lines %d bytes", n, r.n, r.bytes)
		}
		r.mu.Unlock()
	}
}
