package proc

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A child that needs a umask of its own or no_new_privs is forked from one
// of two threads kept for it, not from the caller's: both are per-thread
// state that a child inherits from the thread that forks it, and setting
// them on any other thread would change mariposa itself (the umask is
// shared by every thread, no_new_privs cannot be undone). Each thread
// unshares its file system attributes (CLONE_FS: cwd, root, umask) from
// the rest of mariposa and sets the umask of each child before its fork;
// the second also sets PR_SET_NO_NEW_PRIVS. They are locked to their
// goroutines and never end, so the children they fork get no early
// parent-death signal (see startOne). A fork here costs a wake-up of the
// thread and one of the caller's (about 0.1 ms on the benchmark's VM): only
// services that ask for a umask or switch user pay it.
type forkThread struct {
	reqs chan forkReq
	base int // the umask the thread started with (mariposa's)
}

type forkReq struct {
	r     *startReq
	umask int // -1: the base
	done  chan error
}

var forkThreads [2]struct {
	once sync.Once
	t    *forkThread
	err  error
}

func specialThread(nnp bool) (*forkThread, error) {
	i := 0
	if nnp {
		i = 1
	}
	ft := &forkThreads[i]
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
			if nnp {
				if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
					ready <- fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
					select {}
				}
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

// startSpecial forks r on the thread for its umask and no_new_privs.
func startSpecial(r *startReq, umask int, nnp bool) error {
	t, err := specialThread(nnp)
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
