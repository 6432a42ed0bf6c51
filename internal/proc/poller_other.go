//go:build !linux

package proc

import (
	"os"
	"sync/atomic"
	"syscall"
)

// followOutput: no poller here; the caller forwards from goroutines.
func followOutput(s *Sink, name string, tap func(Line), out, err int, outAt, errAt *atomic.Int32, done func()) bool {
	return false
}

// followExit: no poller here; the caller waits from a goroutine.
func followExit(pid, pidfd int, claim *atomic.Int32, exited func(syscall.WaitStatus, error)) bool {
	return false
}

// newPipe is a pipe for a child's output: the read end (ours) non-blocking,
// the write end (the child's) blocking, both close-on-exec.
func newPipe() (r int, w *os.File, err error) {
	var p [2]int
	syscall.ForkLock.RLock()
	err = syscall.Pipe(p[:])
	if err == nil {
		syscall.CloseOnExec(p[0])
		syscall.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, nil, os.NewSyscallError("pipe", err)
	}
	if err := syscall.SetNonblock(p[0], true); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return -1, nil, os.NewSyscallError("fcntl", err)
	}
	return p[0], os.NewFile(uintptr(p[1]), "|1"), nil
}
