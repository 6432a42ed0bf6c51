//go:build linux

package proc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The test binary serves forks on its main thread, as mariposa does.
func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	if hs := os.Getenv("PROC_TEST_AFTER_EXEC"); hs != "" {
		os.Exit(afterExec(hs))
	}
	if os.Getenv("PROC_TEST_REAPER_RUN") != "" {
		os.Exit(reaperRun(os.Getenv("PROC_TEST_REAPER_RUN") == "plain"))
	}
	if os.Getenv("PROC_TEST_EXEC_HELPER") != "" {
		os.Exit(ServeForks(beforeExec))
	}
	os.Exit(ServeForks(m.Run))
}

// afterExec runs in the re-exec'd image. Every child handed over must
// still run and still be ours; it is adopted (through its pidfd, or the
// PID 1 reaper with PROC_TEST_REAPER) with its output, and one killed
// before its adoption has its exit status all the same.
func afterExec(list string) int {
	var hs []Handoff
	if err := json.Unmarshal([]byte(list), &hs); err != nil {
		fmt.Println(err)
		return 1
	}
	reaper := os.Getenv("PROC_TEST_REAPER") != ""
	var pids []int
	for _, h := range hs {
		pids = append(pids, h.Pid)
	}
	if reaper {
		EnableReaper()
		ExpectAdoption(pids)
	}
	deadline := time.Now().Add(300 * time.Millisecond) // a parent-death signal would have landed
	for time.Now().Before(deadline) {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) != nil || (!reaper && zombie(pid)) {
				fmt.Printf("child %d: gone after the exec\n", pid)
				return 1
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The first child dies before its adoption; with the reaper, it is
	// reaped (as an expected adoption) before Adopt is called.
	_ = syscall.Kill(hs[0].Pid, syscall.SIGKILL)
	dead := func() bool { return !reaper && zombie(hs[0].Pid) || reaper && syscall.Kill(hs[0].Pid, 0) != nil }
	for until := time.Now().Add(5 * time.Second); !dead(); time.Sleep(time.Millisecond) {
		if time.Now().After(until) {
			fmt.Printf("child %d: not dead 5s after SIGKILL\n", hs[0].Pid)
			return 1
		}
	}
	var mu sync.Mutex
	lines := map[string]int{}
	var ps []*Process
	for i, h := range hs {
		name := strconv.Itoa(i)
		p, err := Adopt(h, nil, name, func(l Line) { mu.Lock(); lines[l.Name]++; mu.Unlock() })
		if err != nil {
			fmt.Println("adopt:", err)
			return 1
		}
		ps = append(ps, p)
	}
	select {
	case <-ps[0].Done():
		if e := ps[0].Exit(); e.Signal != syscall.SIGKILL {
			fmt.Printf("the child killed before its adoption: %s\n", e)
			return 1
		}
	case <-time.After(5 * time.Second):
		fmt.Println("the child killed before its adoption: no exit")
		return 1
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
	// The chatty child's output is read by this image.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := lines["1"]
		mu.Unlock()
		if n >= 5 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Printf("the chatty child's lines after the exec: %d\n", n)
			return 1
		}
	}
	for i, p := range ps[1:] {
		select {
		case <-p.Done():
			fmt.Printf("child %d exited: %s\n", p.Pid, p.Exit())
			return 1
		default:
		}
		_ = p.Signal(syscall.SIGTERM)
		if e := p.Exit(); e.Signal != syscall.SIGTERM {
			fmt.Printf("child %d (%d): %s\n", i+1, p.Pid, e)
			return 1
		}
	}
	fmt.Println("children alive after exec:", len(pids))
	return 0
}

// zombie: pid has exited and is not reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// beforeExec is the process TestChildrenSurviveExec re-execs (dispatched
// by TestMain, so no test of its own is skipped): it forks 12 children
// from as many goroutines, freezes them and execs itself with their
// handoffs, after which afterExec checks them.
func beforeExec() int {
	var mu sync.Mutex
	procs := map[int]*Process{}
	var wg sync.WaitGroup
	var failed atomic.Bool
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.Gosched()
			spec := Spec{Argv: []string{"sleep", "60"}}
			switch {
			case i == 1:
				spec.Argv = []string{"/bin/sh", "-c", "i=0; while :; do echo $i; i=$((i+1)); sleep 0.01; done"}
			case i%3 == 1:
				spec.Umask, spec.HasUmask = 0o027, true
			case i%3 == 2:
				spec.NoNewPrivs = true
			}
			p, err := Start(spec)
			if err != nil {
				fmt.Println(err)
				failed.Store(true)
				return
			}
			mu.Lock()
			procs[i] = p
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed.Load() {
		return 1
	}
	stray, err := Start(Spec{Argv: []string{"sleep", "60"}})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if _, err := Freeze(); err != nil {
		fmt.Println(err)
		return 1
	}
	var hs []Handoff
	var fds []int
	for i := range 12 {
		h, ok := procs[i].Handoff()
		if !ok {
			fmt.Printf("child %d: no handoff\n", i)
			return 1
		}
		hs = append(hs, h)
		fds = append(fds, h.Fds()...)
	}
	b, _ := json.Marshal(hs)
	self, _ := os.Executable()
	err = Exec(self, []string{self, "-test.run=^$"}, append(os.Environ(), "PROC_TEST_AFTER_EXEC="+string(b),
		"PROC_TEST_STRAY="+strconv.Itoa(stray.Pid)), func() error { return KeepOpen(fds) })
	fmt.Printf("exec: %v\n", err)
	return 1
}

// TestChildrenSurviveExec: children forked from any goroutine (with a
// umask, with no_new_privs, or neither) are forked on the main thread, so
// an exec of mariposa from that thread (the upgrade in place) neither
// kills them (their parent-death signal follows the forking thread) nor
// takes them away: the new image adopts them, through their pidfds or as
// PID 1's reaper (a child that exits before its adoption included), with
// their output; a child not handed over is killed and reaped by
// KillStrays, the others left alone.
func TestChildrenSurviveExec(t *testing.T) {
	for _, reaper := range []bool{false, true} {
		t.Run(map[bool]string{false: "pidfd", true: "reaper"}[reaper], func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "PROC_TEST_EXEC_HELPER=1")
			if reaper {
				cmd.Env = append(cmd.Env, "PROC_TEST_REAPER=1")
			}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "children alive after exec: 12") {
				t.Fatalf("%v\n%s", err, out)
			}
		})
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
