//go:build linux && (amd64 || arm64)

package proc

import (
	"syscall"
	"unsafe"
)

// kernelSigaction is the kernel's struct sigaction on amd64 and arm64.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const sigIgn = 1

// ResetIgnoredSignals sets every signal that is ignored to its default
// action. An ignored disposition survives exec, so without this children
// would inherit whatever mariposa's own parent chose to ignore; systemd
// resets them for its services, and so do we. Signals with a Go handler are
// left alone (exec resets those anyway). Call it after signal.Notify, so
// the signals mariposa handles are not briefly fatal.
func ResetIgnoredSignals() (reset []syscall.Signal) {
	for sig := 1; sig <= 64; sig++ {
		if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		var old kernelSigaction
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0,
			uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 || old.handler != sigIgn {
			continue
		}
		def := kernelSigaction{}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
			uintptr(unsafe.Pointer(&def)), 0, 8, 0, 0); e == 0 {
			reset = append(reset, syscall.Signal(sig))
		}
	}
	return reset
}
