package monoclock

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// A moment goes to CLOCK_MONOTONIC and back within the clock's reading
// jitter, in this process.
func TestRoundTrip(t *testing.T) {
	for _, ago := range []time.Duration{0, time.Second, -3 * time.Second, time.Hour} {
		at := time.Now().Add(-ago)
		ns, ok := Nanos(at)
		if !ok {
			t.Fatal("CLOCK_MONOTONIC cannot be read")
		}
		back, ok := Time(ns)
		if !ok {
			t.Fatal("CLOCK_MONOTONIC cannot be read")
		}
		if d := back.Sub(at); d < -10*time.Millisecond || d > 10*time.Millisecond {
			t.Errorf("%v ago came back %v off", ago, d)
		}
	}
}

// Across processes, as across an upgrade's images: a child reads the
// moment its parent wrote, and finds it in the past by what passed since.
func TestAcrossProcesses(t *testing.T) {
	if ns := os.Getenv("MONOCLOCK_NS"); ns != "" {
		n, _ := strconv.ParseInt(ns, 10, 64)
		at, ok := Time(n)
		if !ok {
			os.Exit(2)
		}
		if ago := time.Since(at); ago < 200*time.Millisecond || ago > time.Minute {
			os.Stdout.WriteString(ago.String())
			os.Exit(1)
		}
		os.Exit(0)
	}
	ns, ok := Nanos(time.Now().Add(-200 * time.Millisecond))
	if !ok {
		t.Fatal("CLOCK_MONOTONIC cannot be read")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcrossProcesses$")
	cmd.Env = append(os.Environ(), "MONOCLOCK_NS="+strconv.FormatInt(ns, 10))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the child read the moment wrong: %v %s", err, out)
	}
}
