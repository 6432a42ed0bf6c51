//go:build !linux

package proc

import (
	"errors"
	"syscall"
)

// Supported says whether this system can supervise. Elsewhere than Linux a
// child would outlive a mariposa killed with SIGKILL: nothing like
// PR_SET_PDEATHSIG kills it, and an orphaned leader child could overlap
// with the next leader.
func Supported() error {
	return errors.New("children must die with their supervisor, and only Linux's parent-death signal (PR_SET_PDEATHSIG) guarantees it")
}

// sysProcAttr: a process group of its own; no parent-death signal, no
// pidfd (pidfd stays -1).
func sysProcAttr(pidfd *int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitPidfd is never called without a pidfd.
func waitPidfd(pid, pidfd int) (ws syscall.WaitStatus, polled bool, err error) {
	return 0, false, nil
}

// intoCgroup: no control groups here.
func intoCgroup(*syscall.SysProcAttr, int) {}
