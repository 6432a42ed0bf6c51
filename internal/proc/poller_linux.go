package proc

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// poller follows every child's output pipes and pidfd from one goroutine,
// through an epoll set of its own that Go's netpoller waits on: an idle
// child costs three registered descriptors and a few hundred bytes, not
// four parked goroutines with their stacks and a read buffer per stream
// (about 40 KB a service). Handlers run on the poller's goroutine, one at a
// time; they must not block (a Sink never does; Spec.Tap must not).
type poller struct {
	epfd int
	file *os.File // epfd's: held, or its finalizer would close epfd
	mu   sync.Mutex
	disp sync.Mutex       // held while a handler runs
	fds  map[int32]func() // fd -> its handler
	buf  []byte           // the read buffer, the poller goroutine's only
}

var (
	pollerOnce sync.Once
	thePoller  *poller // nil when epoll is not available
)

// getPoller starts the poller once; nil means the caller waits the
// goroutine way.
func getPoller() *poller {
	pollerOnce.Do(func() {
		p, rc, err := newPoller()
		if err != nil {
			return
		}
		thePoller = p
		go p.run(rc)
	})
	return thePoller
}

// newPoller makes an epoll set, non-blocking so that os.NewFile hands it to
// Go's netpoller: through rc, the poller's goroutine parks there and no
// thread blocks.
func newPoller() (*poller, syscall.RawConn, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(epfd), "epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return &poller{epfd: epfd, file: f, fds: map[int32]func(){}, buf: make([]byte, 32<<10)}, rc, nil
}

// run waits on the epoll set through rc and calls the handlers of the
// ready fds. It never returns: children depend on it for their exit.
func (p *poller) run(rc syscall.RawConn) {
	events := make([]syscall.EpollEvent, 64)
	for {
		n := p.wait(&rc, events)
		for _, ev := range events[:n] {
			// disp is held by an upgrade's freeze (Freeze): no output
			// read and no child reaped from then on.
			p.disp.Lock()
			p.mu.Lock()
			h := p.fds[ev.Fd]
			p.mu.Unlock()
			if h != nil {
				// A stale event for a closed and reused fd calls the new
				// owner's handler for nothing: handlers tolerate that.
				h()
			}
			p.disp.Unlock()
		}
	}
}

// wait returns the number of ready events. It parks on Go's netpoller
// through *rc; should that ever fail, *rc becomes nil and it blocks a
// thread in epoll_wait from then on, which is heavier but still correct.
func (p *poller) wait(rc *syscall.RawConn, events []syscall.EpollEvent) int {
	for {
		var n int
		var werr error
		poll := func(timeout int) bool {
			for {
				n, werr = syscall.EpollWait(p.epfd, events, timeout)
				if werr != syscall.EINTR {
					return n > 0 || werr != nil
				}
			}
		}
		if *rc != nil {
			if err := (*rc).Read(func(uintptr) bool { return poll(0) }); err != nil {
				*rc = nil
				continue
			}
		} else {
			poll(-1)
		}
		if werr != nil || n < 0 {
			time.Sleep(10 * time.Millisecond) // not expected: do not spin
			continue
		}
		return n
	}
}

// add registers fds (level-triggered, readable) with their handlers, all
// or none: under p.mu, so no handler runs before every one is in.
func (p *poller) add(fds []int, hs []func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, fd := range fds {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
		if syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev) != nil {
			for _, fd := range fds[:i] {
				_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
				delete(p.fds, int32(fd))
			}
			return false
		}
		p.fds[int32(fd)] = hs[i]
	}
	return true
}

// detach unregisters fd without closing it.
func (p *poller) detach(fd int) {
	p.mu.Lock()
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	delete(p.fds, int32(fd))
	p.mu.Unlock()
}

// remove unregisters fd and closes it.
func (p *poller) remove(fd int) {
	p.mu.Lock()
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	delete(p.fds, int32(fd))
	syscall.Close(fd)
	p.mu.Unlock()
}

// followOutput forwards what the child writes to the read ends out and err
// (non-blocking) to s and tap, and calls done once both reached EOF. False:
// nothing was registered (and nothing closed).
//
// outAt and errAt hold out and err while they are open, -1 after their EOF
// (what an upgrade hands over). Either may be -1 at the call: an adopted
// child's stream already closed; done then waits for the other alone.
func followOutput(s *Sink, name string, tap func(Line), out, err int, outAt, errAt *atomic.Int32, done func()) bool {
	p := getPoller()
	if p == nil {
		return false
	}
	var fds []int
	var hs []func()
	open := 0
	eof := func() {
		open-- // on the poller goroutine only
		if open == 0 {
			done()
		}
	}
	for _, st := range []struct {
		fd   int
		at   *atomic.Int32
		kind string
	}{{out, outAt, "stdout"}, {err, errAt, "stderr"}} {
		if st.fd < 0 {
			continue
		}
		open++
		str := &stream{sink: s, name: name, kind: st.kind, tap: tap}
		fd, at := st.fd, st.at
		fds = append(fds, fd)
		hs = append(hs, func() { p.readStream(fd, str, func() { at.Store(-1); eof() }) })
	}
	if open == 0 {
		done()
		return true
	}
	return p.add(fds, hs)
}

// readStream reads what fd holds, a bounded amount so that one chatty child
// cannot starve the others (level-triggered: the rest comes next round).
func (p *poller) readStream(fd int, s *stream, eof func()) {
	for range 4 {
		n, err := syscall.Read(fd, p.buf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return
		case n > 0:
			s.feed(p.buf[:n])
			continue
		}
		// EOF (or a read error, which ends the stream the same way).
		s.flush()
		p.remove(fd)
		eof()
		return
	}
}

// followExit reaps pid once its pidfd is readable and calls exited with the
// status. False: the pidfd cannot be polled; nothing was registered. claim
// is the child's arm state (arm_linux.go): the poller reaps it only while
// no one else follows it.
func followExit(pid, pidfd int, claim *atomic.Int32, exited func(syscall.WaitStatus, error)) bool {
	p := getPoller()
	if p == nil {
		return false
	}
	return p.add([]int{pidfd}, []func(){func() {
		if !claim.CompareAndSwap(armNone, armPoller) {
			return // the main thread follows it (a stale event)
		}
		var ws syscall.WaitStatus
		for {
			wpid, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			switch {
			case err == syscall.EINTR:
				continue
			case err == nil && wpid == 0:
				claim.Store(armNone)
				return // still running (a stale event)
			}
			p.remove(pidfd)
			exited(ws, err)
			return
		}
	}})
}

// newPipe is a pipe for a child's output: the read end (ours) non-blocking,
// the write end (the child's) blocking, both close-on-exec (exec.Cmd dups
// the write end onto the child's stdout or stderr).
func newPipe() (r int, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return -1, nil, os.NewSyscallError("pipe2", err)
	}
	if err := syscall.SetNonblock(p[0], true); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return -1, nil, os.NewSyscallError("fcntl", err)
	}
	return p[0], os.NewFile(uintptr(p[1]), "|1"), nil
}
