package proc

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper waits for every child of the process, for when mariposa is PID 1
// (or a subreaper): orphans re-parented to us are reaped, and the statuses of
// our own children are handed to their waiters instead of being lost.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]func(syscall.WaitStatus, error)
	reaped  int64 // orphans reaped, for tests and logs
	// early holds the statuses of children handed over by an upgrade that
	// exited before their adoption (ExpectAdoption).
	early map[int]syscall.WaitStatus
}

var (
	reaperMu sync.Mutex
	theReap  *reaper
)

func activeReaper() *reaper {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	return theReap
}

// EnableReaper makes this process reap all its children. Call it before any
// child starts; it is meant for PID 1. It returns a func that reports how
// many orphans were reaped.
func EnableReaper() (orphans func() int64) {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	if theReap == nil {
		theReap = &reaper{waiters: map[int]func(syscall.WaitStatus, error){}}
		go theReap.loop()
	}
	r := theReap
	return func() int64 { r.mu.Lock(); defer r.mu.Unlock(); return r.reaped }
}

// register must be called with r.mu held from before the fork until the PID
// is known, so the loop cannot reap a child before it has a waiter. exited
// is called with r.mu held: it must not block.
func (r *reaper) register(pid int, exited func(syscall.WaitStatus, error)) {
	r.waiters[pid] = exited
}

func (r *reaper) loop() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	for range sigs {
		r.reapAll()
	}
}

func (r *reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if exited, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			exited(ws, nil)
			continue
		}
		r.reaped++
	}
}
