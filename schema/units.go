package schema

import (
	"fmt"
	"github.com/mariposa-sh/mariposa/internal/signals"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ParseDuration parses a Go duration string such as "10s" or "1h30m". Bare
// numbers are refused: "10" is ambiguous between seconds and nanoseconds.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf(`a duration must not be empty; write for example "10s"`)
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
		return 0, fmt.Errorf(`%q has no unit; write for example "%ss" (units: ms, s, m, h)`, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf(`%q is not a duration; write for example "10s", "5m" or "1h30m" (units: ms, s, m, h)`, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative; durations must be zero or more", s)
	}
	return d, nil
}

// ParseSignal parses a signal name with or without the SIG prefix, in any case.
func ParseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig, ok := signals.Parse(name); ok {
		return sig, nil
	}
	if _, err := strconv.Atoi(strings.TrimPrefix(name, "SIG")); err == nil {
		return 0, fmt.Errorf("%q: give signals by name, such as \"SIGTERM\" or \"HUP\", not by number", s)
	}
	return 0, fmt.Errorf("%q is not a signal mariposa knows.%s", s, didYouMean(name, signals.Names()))
}

// SignalName is the canonical name of sig ("SIGHUP"), or its number.
func SignalName(sig syscall.Signal) string {
	if n := signals.Name(sig); strings.HasPrefix(n, "SIG") {
		return n
	}
	return strconv.Itoa(int(sig))
}

// ParsePerms parses file permissions written as an octal string ("0640" or "640").
func ParsePerms(s string) (os.FileMode, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "0o"), "0O")
	if t == "" {
		return 0, fmt.Errorf(`permissions must not be empty; write an octal string such as "0640"`)
	}
	n, err := strconv.ParseUint(t, 8, 32)
	if err != nil {
		return 0, fmt.Errorf(`%q is not an octal mode; write for example "0640" or "0755"`, s)
	}
	if n > 0o777 {
		return 0, fmt.Errorf(`%q is out of range; only permission bits (0000 to 0777) are allowed`, s)
	}
	return os.FileMode(n), nil
}
