//go:build !(linux && (amd64 || arm64))

package proc

import "syscall"

// ResetIgnoredSignals is a no-op where the kernel's sigaction layout is not
// known here.
func ResetIgnoredSignals() []syscall.Signal { return nil }
