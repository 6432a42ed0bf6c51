package proc

import (
	"os"
	"syscall"
)

// Supported says whether this system can supervise: nil on Linux.
func Supported() error { return nil }

// sysProcAttr puts the child in its own process group, has the kernel
// SIGKILL it when the forking thread dies (with mariposa: see startOne), and
// asks for a pidfd to wait on.
func sysProcAttr(pidfd *int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: pidfd}
}

// waitPidfd waits until pidfd is readable (the process exited), then reaps
// pid. polled is false when the pidfd cannot be polled; nothing was reaped.
func waitPidfd(pid, pidfd int) (ws syscall.WaitStatus, polled bool, err error) {
	if err := syscall.SetNonblock(pidfd, true); err != nil {
		syscall.Close(pidfd)
		return 0, false, nil
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var werr error
	reaped := false
	rerr := rc.Read(func(uintptr) bool {
		for {
			wpid, e := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			switch {
			case e == syscall.EINTR:
				continue
			case e != nil:
				werr, reaped = e, true
				return true
			case wpid == 0:
				return false // still running: wait for the pidfd
			}
			reaped = true
			return true
		}
	})
	if !reaped {
		// Not pollable (rerr says why): nothing was reaped, so the caller
		// can still wait the ordinary way.
		_ = rerr
		return 0, false, nil
	}
	return ws, true, werr
}

// intoCgroup has the child forked into the cgroup2 directory fd (clone3's
// CLONE_INTO_CGROUP): no migration after the fork, no window in which it
// could fork outside its group.
func intoCgroup(a *syscall.SysProcAttr, fd int) {
	if fd >= 0 {
		a.UseCgroupFD, a.CgroupFD = true, fd
	}
}
