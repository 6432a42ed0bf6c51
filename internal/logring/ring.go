// Package logring keeps each service's recent output lines in memory, bounded
// in lines and bytes, for `mariposa logs` and for error messages that quote
// what a process last said on stderr.
package logring

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"
)

// Line is one line of a service's output.
type Line struct {
	Time   time.Time
	Stream string // stdout | stderr
	Text   string
}

// Defaults for a Set: enough to see why a process failed, small enough that
// a thousand chatty services stay in the tens of megabytes.
const (
	DefaultMaxLines = 1000
	DefaultMaxBytes = 64 << 10
	// MaxLineBytes bounds one kept line; longer lines are cut.
	MaxLineBytes = 4 << 10
)

// cutMark ends a line that was cut.
const cutMark = " [cut]"

// lineOverhead is what a kept line costs besides its text (the Line value in
// the buffer), so a ring of empty lines is bounded by bytes too.
const lineOverhead = 48

// Ring is a bounded ring of one service's recent output lines. The zero
// value is not usable; use New. Safe for concurrent use.
type Ring struct {
	maxLines, maxBytes, maxLine int

	mu      sync.Mutex
	buf     []Line // circular; grows on demand up to maxLines
	start   int    // index of the oldest line
	n       int    // lines kept
	bytes   int    // cost of the kept lines
	lastErr Line
	hasErr  bool
	subs    map[*Follower]struct{}
	closed  bool
}

// New returns an empty ring that keeps at most maxLines lines costing at most
// maxBytes bytes (the text plus a small per-line overhead). Nothing is
// allocated until the first Add. Values < 1 are raised to 1 line and to
// one line's worth of bytes.
func New(maxLines, maxBytes int) *Ring {
	if maxLines < 1 {
		maxLines = 1
	}
	if maxBytes < lineOverhead+1 {
		maxBytes = lineOverhead + 1
	}
	maxLine := MaxLineBytes
	if maxLine > maxBytes-lineOverhead {
		maxLine = maxBytes - lineOverhead
	}
	return &Ring{maxLines: maxLines, maxBytes: maxBytes, maxLine: maxLine}
}

// cut shortens s to at most max bytes (marker included), on a rune boundary.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	mark := cutMark
	keep := max - len(mark)
	if keep < 1 {
		mark, keep = "", max
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	// A fresh string: the kept text must not pin the caller's long one.
	return string([]byte(s[:keep])) + mark
}

func cost(l Line) int { return len(l.Text) + lineOverhead }

// Add appends a line, dropping the oldest ones past the bounds, and hands it
// to every follower that has room. Never blocks.
func (r *Ring) Add(l Line) {
	l.Text = cut(l.Text, r.maxLine)
	if l.Time.IsZero() {
		l.Time = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if l.Stream == "stderr" {
		r.lastErr, r.hasErr = l, true
	}
	c := cost(l)
	for r.n > 0 && (r.n == r.maxLines || r.bytes+c > r.maxBytes) {
		r.dropOldest()
	}
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.start+r.n)%len(r.buf)] = l
	r.n++
	r.bytes += c
	for f := range r.subs {
		f.offer(l)
	}
}

func (r *Ring) dropOldest() {
	r.bytes -= cost(r.buf[r.start])
	r.buf[r.start] = Line{} // release the text
	r.start = (r.start + 1) % len(r.buf)
	r.n--
}

// grow doubles the buffer (from 16, up to maxLines), oldest line first.
func (r *Ring) grow() {
	size := 2 * len(r.buf)
	if size < 16 {
		size = 16
	}
	if size > r.maxLines {
		size = r.maxLines
	}
	nb := make([]Line, size)
	r.copyLast(nb[:r.n], r.n)
	r.buf, r.start = nb, 0
}

// copyLast copies the newest k kept lines into dst (len k), oldest first.
func (r *Ring) copyLast(dst []Line, k int) {
	for i := 0; i < k; i++ {
		dst[i] = r.buf[(r.start+r.n-k+i)%len(r.buf)]
	}
}

// Last returns up to n of the newest lines, oldest first.
func (r *Ring) Last(n int) []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastLocked(n)
}

func (r *Ring) lastLocked(n int) []Line {
	if n > r.n {
		n = r.n
	}
	if n <= 0 {
		return nil
	}
	out := make([]Line, n)
	r.copyLast(out, n)
	return out
}

// Len is the number of lines kept.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Followers is the number of followers subscribed.
func (r *Ring) Followers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.subs)
}

// LastStderr returns the newest stderr line ever added, even when newer
// stdout lines have pushed it out of the ring.
func (r *Ring) LastStderr() (Line, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr, r.hasErr
}

// Event is one followed line. Dropped counts the lines dropped for this
// follower, because it fell behind, just before this one.
type Event struct {
	Line
	Dropped int64
}

// Follower receives the lines added to a ring after it subscribed, through
// a bounded channel: when the reader falls behind, lines are dropped and
// counted, and Add never waits for it.
type Follower struct {
	r       *Ring
	ch      chan Event
	stop    func() bool // unhooks the context
	dropped int64       // guarded by r.mu: dropped since the last queued event
	done    bool        // guarded by r.mu: ch is closed
}

// C delivers the lines. It is closed by Close, by the context given to
// Follow ending, or by the ring being closed (its service removed).
func (f *Follower) C() <-chan Event { return f.ch }

// Dropped returns how many lines were dropped after the last event queued
// on C (not yet told through an event's Dropped), and resets the count. A
// reader needs it only when C has been closed.
func (f *Follower) Dropped() int64 {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	n := f.dropped
	f.dropped = 0
	return n
}

// Close unsubscribes and closes C. Safe to call more than once.
func (f *Follower) Close() {
	if f.stop != nil {
		f.stop()
	}
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	f.closeLocked()
}

func (f *Follower) closeLocked() {
	if f.done {
		return
	}
	f.done = true
	delete(f.r.subs, f)
	close(f.ch)
}

// offer is called with r.mu held.
func (f *Follower) offer(l Line) {
	select {
	case f.ch <- Event{Line: l, Dropped: f.dropped}:
		f.dropped = 0
	default:
		f.dropped++
	}
}

// DefaultFollowBuffer is the follower queue length Follow uses for size < 1.
const DefaultFollowBuffer = 256

// Follow returns up to n of the newest lines and a follower that gets every
// line added afterwards: nothing is missed or repeated between the two. The
// follower has room for size queued lines and ends when ctx does (or on
// Close). On a closed ring the follower's channel is closed at once.
func (r *Ring) Follow(ctx context.Context, n, size int) ([]Line, *Follower) {
	if size < 1 {
		size = DefaultFollowBuffer
	}
	f := &Follower{r: r, ch: make(chan Event, size)}
	r.mu.Lock()
	backlog := r.lastLocked(n)
	if r.closed {
		f.done = true
		close(f.ch)
		r.mu.Unlock()
		return backlog, f
	}
	if r.subs == nil {
		r.subs = map[*Follower]struct{}{}
	}
	r.subs[f] = struct{}{}
	// Set before the follower is shared: Close reads it without the lock.
	f.stop = context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		f.closeLocked()
	})
	r.mu.Unlock()
	return backlog, f
}

// Close ends every follower; later Adds are ignored. The kept lines stay
// readable.
func (r *Ring) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for f := range r.subs {
		f.closeLocked()
	}
}

// Set holds one ring per service, created on first use. Safe for concurrent
// use.
type Set struct {
	maxLines, maxBytes int

	mu    sync.Mutex
	rings map[string]*Ring
}

// NewSet returns a set whose rings have the given bounds (see New).
func NewSet(maxLines, maxBytes int) *Set {
	return &Set{maxLines: maxLines, maxBytes: maxBytes, rings: map[string]*Ring{}}
}

// Get returns the service's ring, creating it if needed.
func (s *Set) Get(name string) *Ring {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rings[name]
	if !ok {
		r = New(s.maxLines, s.maxBytes)
		s.rings[name] = r
	}
	return r
}

// Lookup returns the service's ring if it has one.
func (s *Set) Lookup(name string) (*Ring, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rings[name]
	return r, ok
}

// Add appends a line to the service's ring.
func (s *Set) Add(name string, l Line) { s.Get(name).Add(l) }

// Remove drops the service's ring and ends its followers.
func (s *Set) Remove(name string) {
	s.mu.Lock()
	r, ok := s.rings[name]
	delete(s.rings, name)
	s.mu.Unlock()
	if ok {
		r.Close()
	}
}
