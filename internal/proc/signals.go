package proc

import (
	"syscall"

	"github.com/mariposa-sh/mariposa/internal/signals"
)

// SignalName is the conventional name, e.g. "SIGTERM" (internal/signals).
func SignalName(s syscall.Signal) string { return signals.Name(s) }
