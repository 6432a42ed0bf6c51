package leader

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/internal/leader/leadertest"
)

// clientFor returns an API client for addr (host:port).
func clientFor(t testing.TB, addr string) *api.Client {
	t.Helper()
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = addr
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeClock is time.Now plus an offset a test can jump.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) Now() time.Time       { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *fakeClock) Jump(d time.Duration) { c.off.Add(int64(d)) }

// proxy forwards TCP to an agent's HTTP port; Cut turns it into a black hole
// (connections hang, as in a network partition) until Restore.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		cut := p.cut
		p.mu.Unlock()
		if cut {
			continue // held open, never answered, closed by Restore
		}
		go p.forward(c)
	}
}

func (p *proxy) forward(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	p.conns[u] = struct{}{}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if p.isCut() {
					return // swallow: the other side hangs until Restore closes it
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if !p.isCut() {
					p.drop(c)
					p.drop(u)
				}
				return
			}
		}
	}
	go pipe(u, c)
	go pipe(c, u)
}

func (p *proxy) isCut() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.cut }

func (p *proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Cut black-holes every connection, open and new.
func (p *proxy) Cut() { p.mu.Lock(); p.cut = true; p.mu.Unlock() }

// Restore closes the black-holed connections and forwards again.
func (p *proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.closeAll()
}

// termRec is what the test saw of one term.
type termRec struct {
	who       string
	session   string
	index     uint64
	start     time.Duration // CLOCK_MONOTONIC when onTerm was called
	stop      time.Duration // when the handler saw Lost (the in-process "child" stopped); 0 while it lasts
	err       error
	deadlineD time.Duration // Deadline - time Lost was seen, on the elector's clock (expired terms)
}

// contender runs one elector in the background, and plays a leader-only
// child that starts in onTerm and stops as soon as Lost closes.
type contender struct {
	name  string
	e     *Elector
	clock *fakeClock
	rec   *leadertest.Recorder

	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	cur   *Term
	terms []termRec
	all   *allTerms
}

// allTerms counts terms across contenders, to wait for the next one.
type allTerms struct {
	mu    sync.Mutex
	n     int
	byWho []string
}

func (a *allTerms) add(who string) {
	a.mu.Lock()
	a.n++
	a.byWho = append(a.byWho, who)
	a.mu.Unlock()
}

func (a *allTerms) count() int { a.mu.Lock(); defer a.mu.Unlock(); return a.n }

func (a *allTerms) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.byWho) == 0 {
		return ""
	}
	return a.byWho[len(a.byWho)-1]
}

func startContender(t testing.TB, name string, cfg Config, rec *leadertest.Recorder, all *allTerms) *contender {
	t.Helper()
	c := &contender{name: name, clock: &fakeClock{}, rec: rec, all: all, done: make(chan struct{})}
	if cfg.Now == nil {
		cfg.Now = c.clock.Now
	}
	if cfg.Log == nil {
		cfg.Log = consultest.Logger(t, name)
	}
	if cfg.Value == nil {
		cfg.Value = []byte(name)
	}
	c.e = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		c.e.Run(ctx, c.onTerm)
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *contender) onTerm(t *Term) {
	start := leadertest.Mono()
	stop := c.rec.Start(c.name)
	c.mu.Lock()
	c.cur = t
	i := len(c.terms)
	c.terms = append(c.terms, termRec{who: c.name, session: t.Session, index: t.Index, start: start})
	c.mu.Unlock()
	if c.all != nil {
		c.all.add(c.name)
	}
	<-t.Lost()
	stop()
	end := leadertest.Mono()
	var deadlineD time.Duration
	if d := t.Deadline(); !d.IsZero() {
		deadlineD = d.Sub(c.e.now())
	}
	c.mu.Lock()
	c.cur = nil
	c.terms[i].stop, c.terms[i].err, c.terms[i].deadlineD = end, t.Err(), deadlineD
	c.mu.Unlock()
}

// term returns the current term, nil when not leader.
func (c *contender) term() *Term {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

func (c *contender) records() []termRec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]termRec(nil), c.terms...)
}

// stop cancels Run and waits for it to return.
func (c *contender) stop(t testing.TB) {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s: Run did not return 30s after its context ended", c.name)
	}
}

// waitTerm waits until c leads and returns the term.
func (c *contender) waitTerm(t testing.TB, timeout time.Duration) *Term {
	t.Helper()
	var got *Term
	if !consultest.WaitFor(timeout, func() bool { got = c.term(); return got != nil }) {
		t.Fatalf("%s did not become leader within %v", c.name, timeout)
	}
	return got
}

func waitClosed(t testing.TB, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

func (r termRec) String() string {
	return fmt.Sprintf("%s session %.8s index %d [%.3fs, %.3fs] %v", r.who, r.session, r.index,
		r.start.Seconds(), r.stop.Seconds(), r.err)
}
