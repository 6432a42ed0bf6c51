package proc

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Forks happen on the main thread when mariposa serves them there
// (ServeForks): the thread that forks a child is the one whose exit sends
// it its parent-death signal, and an execve (an upgrade in place) ends
// every thread of the process but the one that calls it. The main thread
// forks every child and is the one that execs, so a re-exec keeps every
// child alive, and the new image's main thread is the same kernel task:
// the children's parent-death signal stays armed on the thread that will
// fork the next ones.

type mainReq struct {
	r     *startReq
	umask int // -1: the base
	// exec, when set, replaces the process image instead of a fork.
	exec *execReq
	done chan error
}

type execReq struct {
	path       string
	argv, envv []string
	before     func() error // called on the main thread just before execve
}

// mainLoop is what the main thread serves: fork and exec requests, queued
// and announced through an eventfd, and the exits of the armed children
// (Arm), whose pidfds are in its epoll set. The main thread blocks in
// epoll_wait, so an armed child's exit wakes it directly, as wait4 wakes a
// C supervisor: it reaps the child and forks the successor at once.
type mainLoop struct {
	ep, kick int
	mu       sync.Mutex
	reqs     []mainReq
	armed    map[int32]*Process // pidfd -> its armed process
	result   atomic.Pointer[int]
}

var theMain atomic.Pointer[mainLoop]

// mainBase is the main thread's umask outside a fork.
var mainBase int

// ServeForks runs run on another goroutine and serves forks (and an exec)
// on the calling one until run returns, with run's result. The caller must
// be the main goroutine locked to the main thread (runtime.LockOSThread in
// an init of package main). Where the calling thread is not the main thread
// or cannot unshare its file system attributes, forks stay where they were
// (the calling goroutine's thread) and Exec reports it cannot.
func ServeForks(run func() int) int {
	if unix.Gettid() != unix.Getpid() {
		return run()
	}
	// The umask is per fs struct: unshared, the main thread sets each
	// child's umask around its fork without changing mariposa's.
	if err := syscall.Unshare(syscall.CLONE_FS); err != nil {
		return run()
	}
	m, err := newMainLoop()
	if err != nil {
		return run()
	}
	mainBase = syscall.Umask(0o022)
	syscall.Umask(mainBase)
	theMain.Store(m)
	go func() {
		code := run()
		m.result.Store(&code)
		m.wake()
	}()
	return m.serve()
}

func newMainLoop() (*mainLoop, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	kick, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		syscall.Close(ep)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(kick)}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, kick, &ev); err != nil {
		syscall.Close(ep)
		syscall.Close(kick)
		return nil, err
	}
	return &mainLoop{ep: ep, kick: kick, armed: map[int32]*Process{}}, nil
}

// serve is the main thread's loop: it blocks in epoll_wait (a system call
// the runtime gives the thread's P away during, like any other), serves
// the queued requests and the armed exits, until run's result is in.
func (m *mainLoop) serve() int {
	events := make([]syscall.EpollEvent, 16)
	var one [8]byte
	for {
		n, err := syscall.EpollWait(m.ep, events, -1)
		if err != nil {
			if err != syscall.EINTR {
				time.Sleep(time.Millisecond) // not expected: do not spin
			}
			continue
		}
		for _, ev := range events[:n] {
			if ev.Fd == int32(m.kick) {
				_, _ = syscall.Read(m.kick, one[:])
				continue
			}
			m.exited(ev.Fd)
		}
		for {
			m.mu.Lock()
			if len(m.reqs) == 0 {
				m.mu.Unlock()
				break
			}
			q := m.reqs[0]
			m.reqs[0] = mainReq{}
			m.reqs = m.reqs[1:]
			m.mu.Unlock()
			q.done <- serveMain(q)
		}
		if code := m.result.Load(); code != nil {
			return *code
		}
	}
}

// wake has the main thread look at its queue.
func (m *mainLoop) wake() {
	one := [8]byte{1}
	_, _ = syscall.Write(m.kick, one[:])
}

// call queues q for the main thread and waits for its answer.
func (m *mainLoop) call(q mainReq) error {
	q.done = make(chan error, 1)
	m.mu.Lock()
	m.reqs = append(m.reqs, q)
	m.mu.Unlock()
	m.wake()
	return <-q.done
}

func serveMain(q mainReq) error {
	if e := q.exec; e != nil {
		if e.before != nil {
			if err := e.before(); err != nil {
				return err
			}
		}
		return syscall.Exec(e.path, e.argv, e.envv)
	}
	return forkMain(q.r, q.umask)
}

// forkMain forks r on the main thread with umask (-1: mariposa's).
func forkMain(r *startReq, umask int) error {
	if umask < 0 {
		return startOne(r)
	}
	syscall.Umask(umask)
	defer syscall.Umask(mainBase)
	return startOne(r)
}

// onMain reports whether forks are served on the main thread.
func onMain() bool { return theMain.Load() != nil && !forkHere }

// forkHere forks on the caller's thread even when the main thread serves
// forks: BenchmarkForkOnMainThread's baseline only.
var forkHere bool

// startMain forks r on the main thread, with umask (-1: mariposa's).
func startMain(r *startReq, umask int) error {
	return theMain.Load().call(mainReq{r: r, umask: umask})
}

// ErrNoMainThread: forks are not served on the main thread (ServeForks),
// so an exec would kill the children other threads forked.
var ErrNoMainThread = errors.New("children are not forked on the main thread: an exec would kill them")

// Exec replaces mariposa's image with path, on the main thread, after
// before (which may clear close-on-exec flags). It returns only on failure:
// the old image goes on.
func Exec(path string, argv, envv []string, before func() error) error {
	m := theMain.Load()
	if m == nil {
		return ErrNoMainThread
	}
	return m.call(mainReq{exec: &execReq{path: path, argv: argv, envv: envv, before: before}})
}

// The no_new_privs trampoline. no_new_privs is per thread and cannot be
// undone, so the main thread, which forks every child, cannot set it: a
// child that needs it is forked as mariposa itself (/proc/self/exe) under
// this argv[0], sets it on itself and execs the service. An exec failure
// is written to fd 3 (a close-on-exec pipe: EOF means the exec went
// through), so the parent reports it as a start error like any other.
const trampolineArg0 = "mariposa-no-new-privs"

func init() {
	if len(os.Args) < 3 || os.Args[0] != trampolineArg0 {
		return
	}
	_, _ = unix.FcntlInt(3, unix.F_SETFD, unix.FD_CLOEXEC)
	err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if err == nil {
		err = syscall.Exec(os.Args[1], os.Args[2:], os.Environ())
	}
	errno, ok := err.(syscall.Errno)
	if !ok {
		errno = syscall.EINVAL
	}
	b := []byte{byte(errno), byte(errno >> 8), byte(errno >> 16), byte(errno >> 24)}
	_, _ = syscall.Write(3, b)
	fmt.Fprintf(os.Stderr, "mariposa: no_new_privs exec of %s: %v\n", os.Args[1], err)
	os.Exit(127)
}

// trampoline rewrites cmd to go through the no_new_privs trampoline and
// returns the read end of its error pipe.
func trampoline(cmdPath string, args []string) (path string, argv []string, errR, errW *os.File, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", nil, nil, nil, err
	}
	return "/proc/self/exe", append([]string{trampolineArg0, cmdPath}, args...), r, w, nil
}

// trampolineResult reads the trampoline's exec error: nil once the pipe
// closes empty (the service runs).
func trampolineResult(r *os.File) error {
	defer r.Close()
	var b [4]byte
	n, _ := r.Read(b[:])
	if n < 4 {
		return nil
	}
	return syscall.Errno(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}
