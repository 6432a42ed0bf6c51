package proc

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"sync"
	"sync/atomic"
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
type Sink struct {
	ch      chan Line
	write   func(Line)
	dropped atomic.Int64
	// Dropped lines are reported through this, with the count since the
	// last report.
	report func(n int64)
	done   chan struct{}
	// mu orders pushes against Close: no send on a closed channel.
	mu     sync.RWMutex
	closed bool
}

// NewSink starts a sink with room for size queued lines.
func NewSink(size int, write func(Line), reportDropped func(n int64)) *Sink {
	s := &Sink{ch: make(chan Line, size), write: write, report: reportDropped, done: make(chan struct{})}
	go s.run()
	return s
}

func (s *Sink) run() {
	defer close(s.done)
	for l := range s.ch {
		s.write(l)
		if n := s.dropped.Swap(0); n > 0 && s.report != nil {
			s.report(n)
		}
	}
}

// Dropped is the number of lines dropped and not yet reported.
func (s *Sink) Dropped() int64 { return s.dropped.Load() }

// Close stops the sink after the queued lines are written. Lines pushed
// after Close are dropped.
func (s *Sink) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	s.mu.Unlock()
	<-s.done
}

func (s *Sink) push(l Line) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.dropped.Add(1)
		return
	}
	select {
	case s.ch <- l:
	default:
		s.dropped.Add(1)
	}
}

// forward reads r line by line until EOF. It never waits on the sink. The
// buffer starts small (a thousand idle services are a thousand readers) and
// a long line is gathered up to maxLine, then passed on in pieces.
func (s *Sink) forward(name, stream string, r *os.File, tap func(Line)) {
	defer r.Close()
	if s == nil && tap == nil {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	br := bufio.NewReaderSize(r, 4096)
	var long []byte
	emit := func(b []byte) {
		l := Line{Name: name, Stream: stream, Text: string(bytes.TrimRight(b, "\r\n"))}
		if tap != nil {
			tap(l)
		}
		if s != nil {
			s.push(l)
		}
	}
	for {
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, b...)
			for len(long) >= maxLine {
				emit(long[:maxLine])
				long = append(long[:0], long[maxLine:]...)
			}
			continue
		}
		if len(long) > 0 {
			b = append(long, b...)
			long = long[:0]
		}
		if len(b) > 0 {
			emit(b)
		}
		if cap(long) > maxLine {
			long = nil // do not keep a large buffer for an idle child
		}
		if err != nil {
			return
		}
	}
}
