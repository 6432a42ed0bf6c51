package proc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An upgrade in place (mariposa upgrade) re-execs mariposa with its
// children running: Freeze stops every start, every output read and every
// reap, so that what Handoff reports stays true until the exec; the new
// image adopts each child (Adopt) through the same descriptors, which
// KeepOpen lets through the exec.

// forkGate: every Start holds it for reading from its fork to its
// registration with the poller; Freeze takes it for writing.
var forkGate sync.RWMutex

// Handoff is a running child as the next image adopts it.
type Handoff struct {
	Pid     int       `json:"pid"`
	PidFD   int       `json:"pidfd"`  // -1: none (the PID 1 reaper waits for it)
	Out     int       `json:"stdout"` // read end of its stdout; -1: closed
	Err     int       `json:"stderr"` // of its stderr; -1: closed
	Started time.Time `json:"started"`
}

// Freeze stops every start (a Start waits), every output read and every
// reap until thaw is called: a child that exits meanwhile stays a zombie
// with its PID, for the next image to reap. It fails where children are not
// followed by the poller (nothing to hand over).
func Freeze() (thaw func(), err error) {
	p := getPoller()
	if p == nil {
		return nil, errors.New("children are not followed through epoll here: nothing to hand over")
	}
	forkGate.Lock()
	p.disp.Lock()
	rp := activeReaper()
	if rp != nil {
		rp.mu.Lock()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if rp != nil {
				rp.mu.Unlock()
			}
			p.disp.Unlock()
			forkGate.Unlock()
		})
	}, nil
}

// Handoff reports p for the next image, once frozen. ok is false when p
// has exited (nothing to adopt) or cannot be followed through descriptors.
func (p *Process) Handoff() (h Handoff, ok bool) {
	select {
	case <-p.done:
		return Handoff{}, false
	default:
	}
	h = Handoff{Pid: p.Pid, PidFD: p.pidfd, Out: int(p.outFD.Load()), Err: int(p.errFD.Load()), Started: p.Started}
	if h.PidFD < 0 && activeReaper() == nil {
		return Handoff{}, false
	}
	return h, true
}

// Fds lists the descriptors of h that must survive the exec.
func (h Handoff) Fds() []int {
	var fds []int
	for _, fd := range []int{h.PidFD, h.Out, h.Err} {
		if fd >= 0 {
			fds = append(fds, fd)
		}
	}
	return fds
}

// KeepOpen clears close-on-exec on fds (right before the exec).
func KeepOpen(fds []int) error {
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("fd %d: %w", fd, err)
		}
	}
	return nil
}

// Adopt follows a child the previous image handed over: its output goes to
// output and tap under name, as Start's would, and its exit to Done (at
// once when it exited during the exec). Its descriptors are close-on-exec
// again, so later children do not inherit them.
func Adopt(h Handoff, output *Sink, name string, tap func(Line)) (*Process, error) {
	for _, fd := range h.Fds() {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("adopting pid %d: fd %d: %w", h.Pid, fd, err)
		}
	}
	if getPoller() == nil {
		return nil, errors.New("no epoll: cannot follow an adopted child")
	}
	p := &Process{Pid: h.Pid, Started: h.Started, done: make(chan struct{}), outDone: make(chan struct{}), pidfd: -1}
	p.outFD.Store(int32(h.Out))
	p.errFD.Store(int32(h.Err))
	for _, fd := range []int{h.Out, h.Err} {
		if fd >= 0 {
			_ = syscall.SetNonblock(fd, true)
		}
	}
	if !followOutput(output, name, tap, h.Out, h.Err, &p.outFD, &p.errFD, func() { close(p.outDone) }) {
		return nil, fmt.Errorf("adopting pid %d: cannot follow its output", h.Pid)
	}
	if rp := activeReaper(); rp != nil {
		if h.PidFD >= 0 {
			syscall.Close(h.PidFD)
		}
		rp.mu.Lock()
		if ws, ok := rp.early[h.Pid]; ok {
			// Exited (and reaped) between ExpectAdoption and now.
			delete(rp.early, h.Pid)
			rp.mu.Unlock()
			p.exited(ws, nil)
			return p, nil
		}
		rp.register(h.Pid, p.exited)
		rp.mu.Unlock()
		rp.reapAll() // an exit during the exec sent its SIGCHLD to the old image
		return p, nil
	}
	p.onExit = p.exited
	if h.PidFD < 0 || !followExit(h.Pid, h.PidFD, &p.arm, p.exited) {
		return nil, fmt.Errorf("adopting pid %d: cannot follow its pidfd", h.Pid)
	}
	p.pidfd = h.PidFD
	return p, nil
}

// KillStrays kills and reaps every child of this process that is not in
// known: after an upgrade in place, the children the previous image ran
// but did not hand over (an args check under way at the freeze), which
// nobody would ever wait for. Call it before this image starts a child of
// its own. It returns the PIDs it killed.
func KillStrays(known map[int]bool) []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var strays []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || known[pid] {
				continue
			}
			strays = append(strays, pid)
		}
	}
	rp := activeReaper()
	for _, pid := range strays {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // its process group, as a stop would
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if rp == nil { // the PID 1 reaper reaps it otherwise
			go func() {
				var ws syscall.WaitStatus
				for {
					if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
						return
					}
				}
			}()
		}
	}
	return strays
}

// ExpectAdoption tells the PID 1 reaper (when active) that pids are
// children handed over by the previous image and adopted soon: their exit
// status is kept for Adopt instead of being reaped as an orphan's. Call it
// right after EnableReaper.
func ExpectAdoption(pids []int) {
	rp := activeReaper()
	if rp == nil {
		return
	}
	rp.mu.Lock()
	if rp.early == nil {
		rp.early = map[int]syscall.WaitStatus{}
	}
	for _, pid := range pids {
		if _, ok := rp.waiters[pid]; !ok {
			rp.waiters[pid] = func(ws syscall.WaitStatus, _ error) { rp.early[pid] = ws }
		}
	}
	rp.mu.Unlock()
	rp.reapAll() // exits during the exec
}
