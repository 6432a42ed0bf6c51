package proc

import (
	"bytes"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Line is one line of a child's output.
type Line struct {
	Name   string // the service
	Stream string // stdout | stderr
	Text   string
}

// maxLine bounds one forwarded line; longer lines arrive in pieces.
const maxLine = 64 << 10

// Sink carries output lines from every child to one writer through a bounded
// queue. When the writer falls behind, lines are dropped and counted rather
// than letting a child block on a full pipe.
//
// The queue is a slice that grows with what is queued and is let go once
// drained, not a channel of its full size: a channel of 4,096 lines holds
// 192 KB for a node whose children print nothing (and the heap goal grows
// with it), where a queue that grows costs what is printed.
type Sink struct {
	size    int // the most lines queued; more are dropped
	write   func(Line)
	dropped atomic.Int64
	// Dropped lines are reported through this, with the count since the
	// last report.
	report func(n int64)
	wake   chan struct{} // one pending wake-up for run
	done   chan struct{}

	mu     sync.Mutex
	queue  []Line
	busy   bool // run is writing a batch taken from queue
	closed bool
}

// NewSink starts a sink with room for size queued lines.
func NewSink(size int, write func(Line), reportDropped func(n int64)) *Sink {
	s := &Sink{size: size, write: write, report: reportDropped, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.run()
	return s
}

// keptQueue is the capacity a drained queue keeps for the next lines; a
// larger one (a burst) is let go.
const keptQueue = 64

func (s *Sink) run() {
	defer close(s.done)
	var batch []Line
	for {
		<-s.wake
		for {
			s.mu.Lock()
			if len(s.queue) == 0 {
				s.busy = false
				closed := s.closed
				s.mu.Unlock()
				if closed {
					return
				}
				break
			}
			// Swap the queue with the written batch: pushes go on
			// while the batch is written, and no line is copied.
			batch, s.queue = s.queue, batch[:0]
			if cap(s.queue) > keptQueue {
				s.queue = nil
			}
			s.busy = true
			s.mu.Unlock()
			for i := range batch {
				s.write(batch[i])
				batch[i] = Line{}
			}
			if n := s.dropped.Swap(0); n > 0 && s.report != nil {
				s.report(n)
			}
			if cap(batch) > keptQueue {
				batch = nil
			}
		}
	}
}

// Flush waits up to timeout for the queued lines to be written (before an
// upgrade's exec: nothing is read from the children meanwhile).
func (s *Sink) Flush(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for s.pending() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// pending: lines queued or being written.
func (s *Sink) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) > 0 || s.busy
}

// Dropped is the number of lines dropped and not yet reported.
func (s *Sink) Dropped() int64 { return s.dropped.Load() }

// Close stops the sink after the queued lines are written. Lines pushed
// after Close are dropped.
func (s *Sink) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.poke()
	<-s.done
}

func (s *Sink) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Sink) push(l Line) {
	s.mu.Lock()
	if s.closed || len(s.queue) >= s.size {
		s.mu.Unlock()
		s.dropped.Add(1)
		return
	}
	s.queue = append(s.queue, l)
	s.mu.Unlock()
	s.poke()
}

// forward reads r line by line until EOF, on a goroutine of its own: where
// the poller is not available. It never waits on the sink.
func (s *Sink) forward(name, kind string, r *os.File, tap func(Line)) {
	defer r.Close()
	st := &stream{sink: s, name: name, kind: kind, tap: tap}
	if st.discards() {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		st.feed(buf[:n])
		if err != nil {
			st.flush()
			return
		}
	}
}

// stream cuts one output stream of a child into lines. A long line is
// gathered up to maxLine, then passed on in pieces. Between lines it holds
// no buffer: a thousand idle services are a thousand idle streams.
type stream struct {
	sink       *Sink
	name, kind string // the service; stdout | stderr
	tap        func(Line)
	part       []byte // the start of a line whose end has not come yet
}

// discards: nobody reads the lines.
func (s *stream) discards() bool { return s.sink == nil && s.tap == nil }

func (s *stream) emit(b []byte) {
	l := Line{Name: s.name, Stream: s.kind, Text: string(bytes.TrimRight(b, "\r\n"))}
	if s.tap != nil {
		s.tap(l)
	}
	if s.sink != nil {
		s.sink.push(l)
	}
}

// feed takes the next bytes read.
func (s *stream) feed(b []byte) {
	if s.discards() {
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.part = append(s.part, b...)
			// More than maxLine: a piece goes. Exactly maxLine waits
			// for what follows, so that a line of maxLine bytes
			// arrives whole, not as itself and an empty line.
			for len(s.part) > maxLine {
				s.emit(s.part[:maxLine])
				s.part = append(s.part[:0], s.part[maxLine:]...)
			}
			return
		}
		line := b[:i]
		b = b[i+1:]
		if len(s.part) > 0 {
			line = append(s.part, line...)
			s.part = nil
		}
		for len(line) > maxLine {
			s.emit(line[:maxLine])
			line = line[maxLine:]
		}
		s.emit(line)
	}
}

// flush passes on an unterminated last line, at EOF.
func (s *stream) flush() {
	if len(s.part) > 0 && !s.discards() {
		s.emit(s.part)
	}
	s.part = nil
}

// queued is how many lines wait in the queue (tests).
func (s *Sink) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}
