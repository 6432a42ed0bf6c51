// Package leadertest checks the safety property of leader election: two
// leader-only children of one service never run at the same time. Tests
// record when each child (or each in-process term) started and stopped on
// CLOCK_MONOTONIC, which every process on the machine shares, and hand the
// intervals to CheckNoOverlap. In-process electors and real mariposa processes
// (whose children stamp their start and stop with internal/testchild
// -stamp-file) use the same checker.
package leadertest

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Interval is one run of a leader-only child, on CLOCK_MONOTONIC.
type Interval struct {
	Who   string        // who ran it, for the report: a node, an elector, a PID
	Start time.Duration // CLOCK_MONOTONIC reading
	Stop  time.Duration // CLOCK_MONOTONIC reading; 0 means it never stopped
}

func (iv Interval) String() string {
	stop := "running"
	if iv.Stop != 0 {
		stop = fmt.Sprintf("%.3fs", iv.Stop.Seconds())
	}
	return fmt.Sprintf("%s [%.3fs, %s]", iv.Who, iv.Start.Seconds(), stop)
}

// Mono reads CLOCK_MONOTONIC, the clock testchild stamps with. Go's own
// monotonic readings are relative to the process start, so they cannot be
// compared across processes; this can.
func Mono() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot happen on Linux
	}
	return time.Duration(ts.Nano())
}

// CheckNoOverlap returns an error naming every pair of intervals that overlap
// in time, or any interval that stops before it starts. An interval that never
// stopped overlaps everything that starts after it. Intervals that merely
// touch (one stops at the nanosecond the other starts) do not overlap.
func CheckNoOverlap(ivs []Interval) error {
	s := append([]Interval(nil), ivs...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Start < s[j].Start })
	var problems []string
	for _, iv := range s {
		if iv.Stop != 0 && iv.Stop < iv.Start {
			problems = append(problems, fmt.Sprintf("%s stops before it starts", iv))
		}
	}
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			// s[j] starts at or after s[i]; they overlap when s[i] is still
			// running at that moment.
			if s[i].Stop == 0 || s[j].Start < s[i].Stop {
				problems = append(problems, fmt.Sprintf("overlap of %v: %s and %s",
					overlap(s[i], s[j]), s[i], s[j]))
			} else {
				break // sorted by start: nothing later starts before s[i] stops
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d problem(s) in %d intervals:\n  %s", len(problems), len(s),
			strings.Join(problems, "\n  "))
	}
	return nil
}

// overlap is how long a (started first) and b ran together; -1 if unbounded.
func overlap(a, b Interval) time.Duration {
	end := a.Stop
	if end == 0 || (b.Stop != 0 && b.Stop < end) {
		end = b.Stop
	}
	if end == 0 {
		return -1
	}
	return end - b.Start
}

// ParseStamps reads testchild's -stamp-file ("start|stop PID MONOTONIC_NS"
// lines) into one interval per PID, named who+" pid N". A child killed with
// SIGKILL writes no stop line: its interval has Stop 0, and the caller should
// set Stop to when it saw the process gone (or leave it, which counts as
// never stopped).
func ParseStamps(r io.Reader, who string) ([]Interval, error) {
	var out []Interval
	open := map[int]int{} // pid -> index in out
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want 'start|stop PID NS', got %q", n, sc.Text())
		}
		pid, err1 := strconv.Atoi(f[1])
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("line %d: bad number in %q", n, sc.Text())
		}
		switch f[0] {
		case "start":
			open[pid] = len(out)
			out = append(out, Interval{Who: fmt.Sprintf("%s pid %d", who, pid), Start: time.Duration(ns)})
		case "stop":
			i, ok := open[pid]
			if !ok {
				return nil, fmt.Errorf("line %d: stop of pid %d that never started", n, pid)
			}
			out[i].Stop = time.Duration(ns)
			delete(open, pid)
		default:
			return nil, fmt.Errorf("line %d: unknown stamp %q", n, f[0])
		}
	}
	return out, sc.Err()
}

// Recorder collects intervals from concurrent goroutines, e.g. one per
// in-process elector.
type Recorder struct {
	mu  sync.Mutex
	ivs []Interval
}

// Start records that who started now and returns the function that records
// its stop. Calling the stop function more than once keeps the first stop.
func (r *Recorder) Start(who string) (stop func()) {
	r.mu.Lock()
	i := len(r.ivs)
	r.ivs = append(r.ivs, Interval{Who: who, Start: Mono()})
	r.mu.Unlock()
	return func() {
		now := Mono()
		r.mu.Lock()
		if r.ivs[i].Stop == 0 {
			r.ivs[i].Stop = now
		}
		r.mu.Unlock()
	}
}

// Add records a finished or running interval.
func (r *Recorder) Add(iv Interval) {
	r.mu.Lock()
	r.ivs = append(r.ivs, iv)
	r.mu.Unlock()
}

// Intervals returns a copy of what was recorded.
func (r *Recorder) Intervals() []Interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Interval(nil), r.ivs...)
}
