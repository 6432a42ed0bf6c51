// Package auditlog appends a node's events to a local JSON-lines file,
// bounded in size by rotation, without ever making the caller wait: lines
// go through a bounded queue to a writer goroutine, and when the disk is
// slower than the events, lines are dropped and the count is logged.
//
// The file holds one JSON object per line, as the caller marshalled it.
// When writing a line would take the file past MaxBytes, the file is
// rotated first: PATH.1 becomes PATH.2 and so on up to PATH.<Keep>, the
// oldest is removed, and PATH becomes PATH.1. A line longer than MaxBytes
// is written alone in its file. So the files take at most
// (Keep+1) * MaxBytes, give or take one line each.
package auditlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults: a file of 10 MiB holds tens of thousands of events; with 3
// old files the log takes at most 40 MiB.
const (
	DefaultMaxBytes = 10 << 20
	DefaultKeep     = 3
	DefaultQueue    = 1024
)

// Options configure a Writer.
type Options struct {
	// Path is the file; its directory is created (0700) if missing, the
	// file is created 0600 and appended to.
	Path string
	// MaxBytes is a file's size before it is rotated (default
	// DefaultMaxBytes); Keep is how many rotated files are kept (default
	// DefaultKeep; negative keeps none).
	MaxBytes int64
	Keep     int
	// Queue is how many lines wait for the disk before new ones are
	// dropped (default DefaultQueue).
	Queue int
	// Log receives the warnings: lines dropped, write errors (at most one
	// a minute while they last).
	Log hclog.Logger
}

// Writer appends lines to the file from its own goroutine.
type Writer struct {
	opts Options
	ch   chan []byte
	done chan struct{}

	// mu orders pushes against Close: no send on a closed channel.
	mu     sync.RWMutex
	closed bool

	dropped atomic.Int64 // dropped and not yet reported
	total   atomic.Int64 // dropped since Open
	written atomic.Int64 // lines written since Open

	// Owned by the writer goroutine.
	f    *os.File
	size int64
	// Write errors: reported at most once a minute, with the count.
	failed     int64
	lastReport time.Time
	lastErr    error

	// beforeWrite, when set, runs before each line is written (tests
	// stand for a slow disk with it).
	beforeWrite func()
}

// Open opens (or creates) the file and starts the writer.
func Open(opts Options) (*Writer, error) { return openWith(opts, nil) }

func openWith(opts Options, beforeWrite func()) (*Writer, error) {
	if opts.Path == "" {
		return nil, errors.New("audit log: no path")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Keep == 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Keep < 0 {
		opts.Keep = 0
	}
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	w := &Writer{opts: opts, ch: make(chan []byte, opts.Queue), done: make(chan struct{}), beforeWrite: beforeWrite}
	if err := w.open(); err != nil {
		return nil, err
	}
	go w.run()
	return w, nil
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.opts.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	w.f, w.size = f, fi.Size()
	return nil
}

// Path is the file written.
func (w *Writer) Path() string { return w.opts.Path }

// Write queues v as one JSON line. It never waits: when the queue is full
// (the disk is slow) or the writer is closed, the line is dropped and
// counted. A value that does not marshal is dropped too.
func (w *Writer) Write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		w.drop()
		return
	}
	w.WriteLine(b)
}

// WriteLine queues one line (a newline is added); b must not change
// afterwards. It never waits, as Write.
func (w *Writer) WriteLine(b []byte) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.drop()
		return
	}
	select {
	case w.ch <- b:
	default:
		w.drop()
	}
}

func (w *Writer) drop() {
	w.dropped.Add(1)
	w.total.Add(1)
}

// Dropped is how many lines were dropped since Open.
func (w *Writer) Dropped() int64 { return w.total.Load() }

// Written is how many lines reached the file since Open.
func (w *Writer) Written() int64 { return w.written.Load() }

// Close writes the queued lines, closes the file and stops the writer.
// Lines written after Close are dropped.
func (w *Writer) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
	w.mu.Unlock()
	<-w.done
	return nil
}

func (w *Writer) run() {
	defer close(w.done)
	defer func() {
		if w.f != nil {
			_ = w.f.Close()
		}
	}()
	for b := range w.ch {
		if w.beforeWrite != nil {
			w.beforeWrite()
		}
		w.line(b)
		if n := w.dropped.Swap(0); n > 0 {
			w.opts.Log.Warn("audit log fell behind (the disk is slow); dropped events", "dropped", n, "path", w.opts.Path)
		}
	}
}

// line appends one line, rotating first when it would not fit.
func (w *Writer) line(b []byte) {
	n := int64(len(b)) + 1
	if w.f == nil || (w.size > 0 && w.size+n > w.opts.MaxBytes) {
		if err := w.rotate(); err != nil {
			w.failedWrite(err)
			return
		}
	}
	// One write(2) of the whole line with O_APPEND: a reader never sees
	// half a line followed by another one.
	line := make([]byte, len(b)+1)
	copy(line, b)
	line[len(b)] = '\n'
	if _, err := w.f.Write(line); err != nil {
		w.failedWrite(err)
		return
	}
	w.size += n
	w.written.Add(1)
}

// rotate shifts the old files up by one, moves the file to PATH.1 (or
// removes it when none are kept) and opens a new one. A file that could
// not be reopened is tried again at the next line.
func (w *Writer) rotate() error {
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
		p := w.opts.Path
		if w.opts.Keep == 0 {
			_ = os.Remove(p)
		} else {
			_ = os.Remove(fmt.Sprintf("%s.%d", p, w.opts.Keep))
			for i := w.opts.Keep - 1; i >= 1; i-- {
				_ = os.Rename(fmt.Sprintf("%s.%d", p, i), fmt.Sprintf("%s.%d", p, i+1))
			}
			_ = os.Rename(p, p+".1")
		}
	}
	return w.open()
}

// failedWrite counts a lost line and reports write errors at most once a
// minute (a full disk should not flood the log).
func (w *Writer) failedWrite(err error) {
	w.failed++
	w.total.Add(1)
	now := time.Now()
	if w.lastErr == nil || now.Sub(w.lastReport) >= time.Minute {
		w.opts.Log.Warn("could not write the audit log; events lost", "path", w.opts.Path, "lost", w.failed, "error", err)
		w.failed, w.lastReport = 0, now
	}
	w.lastErr = err
}
