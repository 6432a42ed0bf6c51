// Package signals is the table of signal names the service-file language
// and the supervisor share. It is a leaf: schema/ uses it without importing
// any runtime package.
package signals

import (
	"sort"
	"strings"
	"syscall"
)

// signalNames are the signals mariposa knows by name: the service-file
// language accepts exactly these. Only signals that exist on every Unix Go
// supports are listed, so the table builds everywhere.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGCHLD: "SIGCHLD", syscall.SIGCONT: "SIGCONT", syscall.SIGSTOP: "SIGSTOP",
	syscall.SIGTSTP: "SIGTSTP", syscall.SIGTTIN: "SIGTTIN", syscall.SIGTTOU: "SIGTTOU",
	syscall.SIGURG: "SIGURG", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
	syscall.SIGVTALRM: "SIGVTALRM", syscall.SIGPROF: "SIGPROF", syscall.SIGWINCH: "SIGWINCH",
	syscall.SIGIO: "SIGIO", syscall.SIGSYS: "SIGSYS",
}

// Names lists every known name, sorted.
func Names() []string {
	names := make([]string, 0, len(signalNames))
	for _, n := range signalNames {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Name is the conventional name, e.g. "SIGTERM".
func Name(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "signal " + s.String()
}

// Parse accepts "SIGTERM", "TERM" or "term".
func Parse(name string) (syscall.Signal, bool) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	for s, sn := range signalNames {
		if sn == n {
			return s, true
		}
	}
	return 0, false
}
