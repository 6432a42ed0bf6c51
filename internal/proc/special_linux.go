package proc

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A child that needs a umask of its own is forked from a thread kept for
// it when mariposa does not serve forks on its main thread (ServeForks:
// tests and other programs; mariposa itself forks every child on its main
// thread, which sets the umask around each fork). The umask is per-thread
// state that a child inherits from the thread that forks it: the thread
// unshares its file system attributes (CLONE_FS: cwd, root, umask) from the
// rest of mariposa and sets the umask of each child before its fork. It is
// locked to its goroutine and never ends, so the children it forks get no
// early parent-death signal (see startOne). no_new_privs, which cannot be
// undone on a thread, is set by the child itself (the trampoline of
// mainthread_linux.go).
type forkThread struct {
	reqs chan forkReq
	base int // the umask the thread started with (mariposa's)
}

type forkReq struct {
	r     *startReq
	umask int // -1: the base
	done  chan error
}

var umaskThread struct {
	once sync.Once
	t    *forkThread
	err  error
}

func specialThread() (*forkThread, error) {
	ft := &umaskThread
	ft.once.Do(func() {
		t := &forkThread{reqs: make(chan forkReq)}
		ready := make(chan error)
		go func() {
			// Never unlocked, never returns: the thread lives as long as
			// mariposa (see the type's comment).
			runtime.LockOSThread()
			if err := syscall.Unshare(syscall.CLONE_FS); err != nil {
				ready <- fmt.Errorf("unshare(CLONE_FS): %w", err)
				select {}
			}
			t.base = syscall.Umask(0o022)
			syscall.Umask(t.base)
			ready <- nil
			for q := range t.reqs {
				u := q.umask
				if u < 0 {
					u = t.base
				}
				syscall.Umask(u)
				q.done <- startOne(q.r)
			}
		}()
		ft.err = <-ready
		ft.t = t
	})
	return ft.t, ft.err
}

// startSpecial forks r on the thread for its umask.
func startSpecial(r *startReq, umask int) error {
	t, err := specialThread()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	t.reqs <- forkReq{r: r, umask: umask, done: done}
	return <-done
}

// setRlimits applies limits to the child pid right after its fork
// (prlimit: Go's fork has no hook between fork and exec, and rlimits are
// shared by every thread of mariposa, so they cannot be set around it).
func setRlimits(pid int, limits []Rlimit) error {
	for _, l := range limits {
		rl := unix.Rlimit{Cur: l.Value, Max: l.Value}
		if err := unix.Prlimit(pid, l.Resource, &rl, nil); err != nil {
			return fmt.Errorf("setting %s to %d: %w", rlimitName(l.Resource), l.Value, err)
		}
	}
	return nil
}

// Rlimit resources.
const (
	RlimitNOFile = unix.RLIMIT_NOFILE
	RlimitNProc  = unix.RLIMIT_NPROC
	RlimitCore   = unix.RLIMIT_CORE
)
