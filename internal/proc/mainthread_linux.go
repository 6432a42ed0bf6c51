package proc

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

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

var mainReqs atomic.Pointer[chan mainReq]

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
	mainBase = syscall.Umask(0o022)
	syscall.Umask(mainBase)
	reqs := make(chan mainReq)
	mainReqs.Store(&reqs)
	result := make(chan int, 1)
	go func() { result <- run() }()
	for {
		select {
		case q := <-reqs:
			q.done <- serveMain(q)
		case code := <-result:
			return code
		}
	}
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
	if q.umask < 0 {
		return startOne(q.r)
	}
	syscall.Umask(q.umask)
	defer syscall.Umask(mainBase)
	return startOne(q.r)
}

// onMain reports whether forks are served on the main thread.
func onMain() bool { return mainReqs.Load() != nil && !forkHere }

// forkHere forks on the caller's thread even when the main thread serves
// forks: BenchmarkForkOnMainThread's baseline only.
var forkHere bool

// startMain forks r on the main thread, with umask (-1: mariposa's).
func startMain(r *startReq, umask int) error {
	reqs := *mainReqs.Load()
	done := make(chan error, 1)
	reqs <- mainReq{r: r, umask: umask, done: done}
	return <-done
}

// ErrNoMainThread: forks are not served on the main thread (ServeForks),
// so an exec would kill the children other threads forked.
var ErrNoMainThread = errors.New("children are not forked on the main thread: an exec would kill them")

// Exec replaces mariposa's image with path, on the main thread, after
// before (which may clear close-on-exec flags). It returns only on failure:
// the old image goes on.
func Exec(path string, argv, envv []string, before func() error) error {
	p := mainReqs.Load()
	if p == nil {
		return ErrNoMainThread
	}
	done := make(chan error, 1)
	*p <- mainReq{exec: &execReq{path: path, argv: argv, envv: envv, before: before}, done: done}
	return <-done
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
