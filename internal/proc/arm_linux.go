package proc

import (
	"syscall"
)

// An armed child (Arm) is followed by the main thread rather than the
// poller: when it exits, the main thread reaps it and, if its successor's
// conditions hold, forks the successor at once, before anyone hears of the
// exit; the exit and the successor are then reported together (Done, Next).
// The restart path is then the kernel's wakeup of the main thread and one
// fork, with no goroutine between them: the supervisor decided the restart
// in advance (it arms a child only when its decisions say that exit is
// answered by a start at once) and holds the arm (Hold) while it decides
// anything else, so that what it said stays true until the exit.

// The states of a child's exit (Process.arm).
const (
	armNone   int32 = iota // the poller follows it
	armOn                  // the main thread follows it and forks its successor
	armHeld                // the main thread follows it; no successor until Release
	armBusy                // the main thread is reaping it (and forking)
	armDone                // the main thread reaped it: Done is closed
	armPoller              // the poller is reaping it
	armMoving              // between the poller and the main thread
)

// Successor is a start prepared for when an armed child exits.
type Successor struct {
	Spec Spec
	// FailureOnly: only an exit that is not a success (Exit.Success) starts
	// it; a clean exit is reported alone.
	FailureOnly bool
	// Ready, when set, is asked on the main thread after the reap and
	// before the fork (it must not block): false, and the exit is reported
	// alone.
	Ready func() bool
}

// Arm has the main thread follow p's exit and start s at once when it
// comes (as s allows). False: it cannot (forks are not served on the main
// thread, the PID 1 reaper waits for every child, p has no pidfd, or p has
// exited or is armed already); nothing changed.
func (p *Process) Arm(s *Successor) bool {
	m := theMain.Load()
	pl := getPoller()
	if m == nil || pl == nil || p.pidfd < 0 || p.onExit == nil || activeReaper() != nil {
		return false
	}
	if !p.arm.CompareAndSwap(armNone, armMoving) {
		return false
	}
	p.succ = s
	pl.detach(p.pidfd)
	fd := int32(p.pidfd)
	m.mu.Lock()
	m.armed[fd] = p
	m.mu.Unlock()
	p.arm.Store(armOn)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLONESHOT, Fd: fd}
	if err := syscall.EpollCtl(m.ep, syscall.EPOLL_CTL_ADD, p.pidfd, &ev); err != nil {
		m.mu.Lock()
		delete(m.armed, fd)
		m.mu.Unlock()
		p.arm.Store(armMoving)
		p.toPoller()
		return false
	}
	return true
}

// toPoller gives p's exit back to the poller; p.arm is armMoving.
func (p *Process) toPoller() {
	p.succ = nil
	p.arm.Store(armNone)
	if !followExit(p.Pid, p.pidfd, &p.arm, p.onExit) {
		go func() { p.onExit(waitPidfdOnly(p.Pid, p.pidfd)) }()
	}
}

// Hold keeps an armed p's successor from starting until Release. fired:
// it started already (or its start failed): p is done, and Next has it.
func (p *Process) Hold() (fired bool) {
	for {
		switch p.arm.Load() {
		case armOn:
			if p.arm.CompareAndSwap(armOn, armHeld) {
				return false
			}
		case armBusy:
			<-p.done
			return p.fired
		case armDone:
			return p.fired
		default:
			return false
		}
	}
}

// Release lets a held p's successor start at its exit again.
func (p *Process) Release() { p.arm.CompareAndSwap(armHeld, armOn) }

// Disarm gives p's exit back to the poller, with no successor. fired: the
// successor started already (or its start failed), as Hold says.
func (p *Process) Disarm() (fired bool) {
	for {
		switch st := p.arm.Load(); st {
		case armOn, armHeld:
			if !p.arm.CompareAndSwap(st, armMoving) {
				continue
			}
			m := theMain.Load()
			m.mu.Lock()
			delete(m.armed, int32(p.pidfd))
			m.mu.Unlock()
			_ = syscall.EpollCtl(m.ep, syscall.EPOLL_CTL_DEL, p.pidfd, nil)
			p.toPoller()
			return false
		case armBusy:
			<-p.done
			return p.fired
		case armDone:
			return p.fired
		default:
			return false
		}
	}
}

// Armed reports whether p's exit is followed by the main thread.
func (p *Process) Armed() bool {
	switch p.arm.Load() {
	case armOn, armHeld, armBusy:
		return true
	}
	return false
}

// Next is the successor started at p's exit and its start error; fired is
// false when none was tried. Valid once Done is closed.
func (p *Process) Next() (next *Process, fired bool, err error) {
	<-p.done
	return p.next, p.fired, p.nextErr
}

// exited serves the exit of the armed child whose pidfd is fd, on the
// main thread.
func (m *mainLoop) exited(fd int32) {
	m.mu.Lock()
	p := m.armed[fd]
	delete(m.armed, fd)
	m.mu.Unlock()
	if p == nil {
		return
	}
	_ = syscall.EpollCtl(m.ep, syscall.EPOLL_CTL_DEL, int(fd), nil)
	// Frozen for an upgrade: no reap and no fork; the poller, frozen as
	// well, has the child again, for the handoff.
	if !forkGate.TryRLock() {
		for {
			st := p.arm.Load()
			if st != armOn && st != armHeld {
				return
			}
			if p.arm.CompareAndSwap(st, armMoving) {
				p.toPoller()
				return
			}
		}
	}
	defer forkGate.RUnlock()
	var was int32
	for {
		was = p.arm.Load()
		if was != armOn && was != armHeld {
			return // disarmed meanwhile: the poller has it
		}
		if p.arm.CompareAndSwap(was, armBusy) {
			break
		}
	}
	var ws syscall.WaitStatus
	var werr error
	for {
		wpid, err := syscall.Wait4(p.Pid, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err == nil && wpid == 0 {
			// Not exited (a pidfd is readable only once it has): follow
			// it again.
			m.mu.Lock()
			m.armed[fd] = p
			m.mu.Unlock()
			p.arm.Store(was)
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLONESHOT, Fd: fd}
			if syscall.EpollCtl(m.ep, syscall.EPOLL_CTL_ADD, int(fd), &ev) != nil {
				m.mu.Lock()
				delete(m.armed, fd)
				m.mu.Unlock()
				p.arm.Store(armMoving)
				p.toPoller()
			}
			return
		}
		werr = err
		break
	}
	if s := p.succ; was == armOn && s != nil {
		e := exitFrom(ws, werr)
		if (!s.FailureOnly || !e.Success()) && (s.Ready == nil || s.Ready()) {
			p.next, p.nextErr = start(s.Spec, true)
			p.fired = true
		}
	}
	p.succ = nil
	syscall.Close(int(fd))
	p.arm.Store(armDone)
	p.onExit(ws, werr)
}

// waitPidfdOnly reaps pid once its pidfd says it exited, from a goroutine
// of its own (where the poller cannot take it back, not expected).
func waitPidfdOnly(pid, pidfd int) (syscall.WaitStatus, error) {
	ws, polled, err := waitPidfd(pid, pidfd)
	if polled {
		return ws, err
	}
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			return ws, err
		}
	}
}
