package volume

import (
	"hash"
	"io"
	"sync"
)

// Two cores do a transfer faster than one: the hashing (SHA-256, the
// slowest step) runs in a goroutine of its own, fed with chunks of at most
// chunkSize bytes, at most chunks of them in flight (bounded memory).
// 256 KiB, not more: the chunks stay in the CPU's cache, and on the
// benchmark machine a write(2) of 1 MiB into the page cache was 6 times
// slower than four of 256 KiB.
const (
	chunkSize = 256 << 10
	chunks    = 8
)

// asyncHasher is a writer that hashes in another goroutine. Its ReadFrom
// reads straight into its chunks (no copy). Sum waits for the hashing.
type asyncHasher struct {
	h    hash.Hash
	ch   chan []byte
	free chan []byte
	done chan struct{}
	cur  []byte
}

func newAsyncHasher(h hash.Hash) *asyncHasher {
	a := &asyncHasher{h: h, ch: make(chan []byte, chunks), free: make(chan []byte, chunks), done: make(chan struct{})}
	for range chunks {
		a.free <- make([]byte, 0, chunkSize)
	}
	go func() {
		defer close(a.done)
		for b := range a.ch {
			a.h.Write(b)
			a.free <- b[:0]
		}
	}()
	a.cur = <-a.free
	return a
}

func (a *asyncHasher) flush() {
	if len(a.cur) > 0 {
		a.ch <- a.cur
		a.cur = <-a.free
	}
}

func (a *asyncHasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(a.cur) == cap(a.cur) {
			a.flush()
		}
		c := copy(a.cur[len(a.cur):cap(a.cur)], p)
		a.cur = a.cur[:len(a.cur)+c]
		p = p[c:]
	}
	return n, nil
}

func (a *asyncHasher) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		if len(a.cur) == cap(a.cur) {
			a.flush()
		}
		c, err := r.Read(a.cur[len(a.cur):cap(a.cur)])
		a.cur = a.cur[:len(a.cur)+c]
		n += int64(c)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// Sum finishes the hashing and returns the sum; the hasher is done.
func (a *asyncHasher) Sum() []byte {
	a.flush()
	close(a.ch)
	<-a.done
	return a.h.Sum(nil)
}

// Close stops the hashing goroutine without a sum.
func (a *asyncHasher) Close() {
	select {
	case <-a.done:
	default:
		close(a.ch)
		<-a.done
	}
}

// prefetcher reads r (the verifier: the socket and the hashing) in a
// goroutine, a chunk ahead, while its reader unpacks.
type prefetcher struct {
	ch   chan pchunk
	free chan []byte
	stop chan struct{}
	wg   sync.WaitGroup
	cur  pchunk
	err  error
}

type pchunk struct {
	buf []byte // the whole chunk, to give back
	b   []byte // what is left to read of it
	err error
}

func newPrefetcher(r io.Reader) *prefetcher {
	p := &prefetcher{ch: make(chan pchunk, chunks), free: make(chan []byte, chunks), stop: make(chan struct{})}
	for range chunks {
		p.free <- make([]byte, chunkSize)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			var buf []byte
			select {
			case buf = <-p.free:
			case <-p.stop:
				return
			}
			// At least a quarter of a chunk per hand-over, keeping the
			// error that ends the stream (io.ReadAtLeast drops it).
			n := 0
			var err error
			for n < len(buf)/4 && err == nil {
				var c int
				c, err = r.Read(buf[n:])
				n += c
			}
			select {
			case p.ch <- pchunk{buf: buf, b: buf[:n], err: err}:
			case <-p.stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *prefetcher) Read(b []byte) (int, error) {
	for len(p.cur.b) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		if p.cur.buf != nil {
			p.free <- p.cur.buf
		}
		p.cur = <-p.ch
		if p.cur.err != nil {
			p.err = p.cur.err
		}
	}
	n := copy(b, p.cur.b)
	p.cur.b = p.cur.b[n:]
	return n, nil
}

func (p *prefetcher) next(max int) ([]byte, error) {
	for len(p.cur.b) == 0 {
		if p.err != nil {
			return nil, p.err
		}
		if p.cur.buf != nil {
			p.free <- p.cur.buf
		}
		p.cur = <-p.ch
		if p.cur.err != nil {
			p.err = p.cur.err
		}
	}
	n := min(max, len(p.cur.b))
	b := p.cur.b[:n]
	p.cur.b = p.cur.b[n:]
	return b, nil
}

// Close stops the goroutine and waits for it: the reader it read is the
// caller's again.
func (p *prefetcher) Close() {
	close(p.stop)
	p.wg.Wait()
}
