//go:build linux

package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestNothingLockedEndsAThread: a child gets its parent-death signal when
// the thread that forked it ends, and startOne forks on whichever thread
// runs the caller. Go ends a thread only when a goroutine exits locked to
// it, so no package linked into mariposa may call runtime.LockOSThread: one
// that did could end a thread that had forked children, and they would be
// killed while mariposa runs. If a dependency comes to need it, make sure
// it always unlocks, list it here, and say why in startOne.
func TestNothingLockedEndsAThread(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \",\"}}", "github.com/mariposa-sh/mariposa").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	call := regexp.MustCompile(`\bLockOSThread\(\)`)
	var found []string
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[0] == "runtime" || f[2] == "" {
			continue
		}
		pkgs++
		for _, name := range strings.Split(f[2], ",") {
			b, err := os.ReadFile(filepath.Join(f[1], name))
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range strings.Split(string(b), "\n") {
				// The umask thread of special_linux.go locks and never
				// ends; main.go locks the main goroutine to the main
				// thread, which ends only with the process.
				if f[0] == "github.com/mariposa-sh/mariposa/internal/proc" && name == "special_linux.go" ||
					f[0] == "github.com/mariposa-sh/mariposa" && name == "main.go" {
					continue
				}
				if call.MatchString(l) && !strings.HasPrefix(strings.TrimSpace(l), "//") {
					found = append(found, fmt.Sprintf("%s/%s:%d: %s", f[0], name, i+1, strings.TrimSpace(l)))
				}
			}
		}
	}
	if pkgs < 100 {
		t.Fatalf("read %d packages; the binary links hundreds: is go list's output what this test expects?", pkgs)
	}
	if len(found) > 0 {
		t.Fatalf("packages of mariposa's binary lock OS threads; a thread that ends kills the children it forked:\n%s", strings.Join(found, "\n"))
	}
}
