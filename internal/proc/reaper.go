package proc

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
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
	// foreign: the children Run started, whose exec.Cmd waits for them.
	foreign map[int]*foreignWait
}

// foreignWait is where the reaper puts the status of a child of Run.
type foreignWait struct {
	seen chan struct{}
	ws   *syscall.WaitStatus
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
		if w, ok := r.foreign[pid]; ok {
			delete(r.foreign, pid)
			*w.ws = ws
			close(w.seen)
			continue
		}
		r.reaped++
	}
}

// Run runs cmd, an exec.Cmd of code other than this package's (a volume
// hook, an upgrade's preflight), as cmd.Run does, also when the reaper is
// on (PID 1): the reaper's wait for any child could otherwise take cmd's
// status first, and cmd.Wait would fail with ECHILD ("waitid: no child
// processes") whatever cmd did. The reaper holds cmd's PID from its fork;
// whichever of the two waits gets the status, Run returns it: nil, or a
// *ReapedExit for a failure the reaper saw.
func Run(cmd *exec.Cmd) error {
	rp := activeReaper()
	if rp == nil {
		return cmd.Run()
	}
	var (
		ws   syscall.WaitStatus
		seen = make(chan struct{})
	)
	rp.mu.Lock()
	if err := cmd.Start(); err != nil {
		rp.mu.Unlock()
		return err
	}
	pid := cmd.Process.Pid
	w := &foreignWait{seen: seen, ws: &ws}
	if rp.foreign == nil {
		rp.foreign = map[int]*foreignWait{}
	}
	rp.foreign[pid] = w
	rp.mu.Unlock()
	err := cmd.Wait()
	if !errors.Is(err, syscall.ECHILD) {
		// cmd.Wait had the status: the PID is no longer ours to wait for
		// (unless a later fork has it already).
		rp.mu.Lock()
		if rp.foreign[pid] == w {
			delete(rp.foreign, pid)
		}
		rp.mu.Unlock()
		return err
	}
	// The reaper had it (seen is closed under the reaper's lock as soon
	// as it reaped it).
	<-seen
	if ws.Exited() && ws.ExitStatus() == 0 {
		return nil
	}
	return &ReapedExit{Status: ws}
}

// ReapedExit is how Run reports a failed exit the reaper saw (where
// cmd.Run would give an *exec.ExitError).
type ReapedExit struct{ Status syscall.WaitStatus }

func (e *ReapedExit) Error() string {
	switch ws := e.Status; {
	case ws.Signaled():
		return "signal: " + ws.Signal().String()
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	default:
		return "exited: status " + strconv.Itoa(int(ws))
	}
}
