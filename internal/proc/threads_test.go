//go:build linux

package proc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Threads:") {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Threads:")))
			return n
		}
	}
	return 0
}

// Waiting for many children costs goroutines, not OS threads.
func TestManyChildrenFewThreads(t *testing.T) {
	before := threads(t)
	var ps []*Process
	for i := 0; i < 200; i++ {
		p, err := Start(Spec{Argv: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	during := threads(t)
	for _, p := range ps {
		_ = p.Signal(syscall.SIGKILL)
	}
	for _, p := range ps {
		if e := p.Exit(); e.Signal != syscall.SIGKILL {
			t.Fatalf("pid %d: %s", p.Pid, e)
		}
	}
	if during-before > 50 {
		t.Fatalf("waiting for 200 children took %d more threads", during-before)
	}
	t.Logf("threads: %d before, %d with 200 children", before, during)
}
