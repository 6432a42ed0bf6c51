// Package monoclock carries a moment from one process to the next on
// CLOCK_MONOTONIC, which both images of an upgrade in place read alike: Go's
// own monotonic readings count from each process's start, and the wall
// clock may step between them.
package monoclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Nanos is t on CLOCK_MONOTONIC in nanoseconds; false when the clock
// cannot be read.
func Nanos(t time.Time) (int64, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, false
	}
	return ts.Nano() - int64(time.Since(t)), true
}

// Time is the moment ns (CLOCK_MONOTONIC, from Nanos, maybe in another
// process) on this process's clock; false when the clock cannot be read.
func Time(ns int64) (time.Time, bool) {
	var ts unix.Timespec
	now := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Time{}, false
	}
	return now.Add(-time.Duration(ts.Nano() - ns)), true
}
