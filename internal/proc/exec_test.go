//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary serves forks on its main thread, as mariposa does.
func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	if pids := os.Getenv("PROC_TEST_AFTER_EXEC"); pids != "" {
		os.Exit(afterExec(pids))
	}
	os.Exit(ServeForks(m.Run))
}

// afterExec runs in the re-exec'd image: every child forked before the
// exec must still run, and still be ours (wait4 answers for it).
func afterExec(list string) int {
	var pids []int
	for _, f := range strings.Split(list, ",") {
		pid, _ := strconv.Atoi(f)
		pids = append(pids, pid)
	}
	deadline := time.Now().Add(300 * time.Millisecond) // a parent-death signal would have landed
	for time.Now().Before(deadline) {
		for _, pid := range pids {
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			if err != nil || got != 0 {
				fmt.Printf("child %d: gone (wait4 %d, %v, %v)\n", pid, got, ws.Signal(), err)
				return 1
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	// One child was not handed over (PROC_TEST_STRAY): KillStrays
	// kills and reaps it, and only it.
	stray, _ := strconv.Atoi(os.Getenv("PROC_TEST_STRAY"))
	known := map[int]bool{}
	for _, pid := range pids {
		known[pid] = true
	}
	killed := KillStrays(known)
	if len(killed) != 1 || killed[0] != stray {
		fmt.Printf("KillStrays killed %v, want [%d]\n", killed, stray)
		return 1
	}
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(stray, 0) == nil; {
		if time.Now().After(deadline) {
			fmt.Printf("stray %d still there (not reaped)\n", stray)
			return 1
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) != nil {
			fmt.Printf("child %d killed with the stray\n", pid)
			return 1
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	fmt.Println("children alive after exec:", len(pids))
	return 0
}

// TestExecHelper is the process TestChildrenSurviveExec re-execs.
func TestExecHelper(t *testing.T) {
	if os.Getenv("PROC_TEST_EXEC_HELPER") == "" {
		t.Skip("run by TestChildrenSurviveExec")
	}
	var mu sync.Mutex
	var pids []string
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.Gosched()
			spec := Spec{Argv: []string{"sleep", "60"}}
			if i%3 == 1 {
				spec.Umask, spec.HasUmask = 0o027, true
			}
			if i%3 == 2 {
				spec.NoNewPrivs = true
			}
			p, err := Start(spec)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			pids = append(pids, strconv.Itoa(p.Pid))
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	stray, err := Start(Spec{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	err = Exec(self, []string{self, "-test.run=^$"}, append(os.Environ(), "PROC_TEST_AFTER_EXEC="+strings.Join(pids, ","),
		"PROC_TEST_STRAY="+strconv.Itoa(stray.Pid)), nil)
	t.Fatalf("exec: %v", err)
}

// TestChildrenSurviveExec: children forked from any goroutine (with a
// umask, with no_new_privs, or neither) are forked on the main thread, so
// an exec of mariposa from that thread (the upgrade in place) neither
// kills them (their parent-death signal follows the forking thread) nor
// takes them away (the new image reaps them); a child not handed over is
// killed and reaped by KillStrays, the others left alone.
func TestChildrenSurviveExec(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestExecHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "PROC_TEST_EXEC_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "children alive after exec: 12") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestNoNewPrivsExecError: the trampoline's exec failure is a start
// error that says why, as a direct exec's would be.
func TestNoNewPrivsExecError(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "notexec")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{script}, {filepath.Join(dir, "missing")}} {
		_, err := Start(Spec{Argv: argv, NoNewPrivs: true})
		var se *StartError
		if !errors.As(err, &se) || !se.Permanent {
			t.Fatalf("%s: %v, want a permanent start error", argv[0], err)
		}
		t.Logf("%s: %v", argv[0], err)
	}
}

// BenchmarkForkOnMainThread: what forking on the main thread (the hop to
// it and back) adds to a start, against forking on the caller's thread.
// Each op starts /bin/true and waits for its exit, as a restart does.
func BenchmarkForkOnMainThread(b *testing.B) {
	for _, here := range []bool{true, false} {
		name := map[bool]string{true: "caller-thread", false: "main-thread"}[here]
		b.Run(name, func(b *testing.B) {
			forkHere = here
			defer func() { forkHere = false }()
			for b.Loop() {
				p, err := Start(Spec{Argv: []string{"/bin/true"}})
				if err != nil {
					b.Fatal(err)
				}
				<-p.Done()
			}
		})
	}
}
