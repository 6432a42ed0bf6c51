//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// reaperRun runs in a child test binary with the reaper on, as mariposa as
// PID 1 is: commands run through Run (plain: through cmd.Run, the
// mutation) must report their own exit every time, though the reaper
// waits for any child.
func reaperRun(plain bool) int {
	EnableReaper()
	run := Run
	if plain {
		run = (*exec.Cmd).Run
	}
	for i := range 300 {
		want := i % 3
		cmd := exec.Command("sh", "-c", fmt.Sprintf("echo out; exit %d", want))
		var out strings.Builder
		cmd.Stdout = &out
		err := run(cmd)
		var got int
		var ee *exec.ExitError
		var re *ReapedExit
		switch {
		case err == nil:
		case errors.As(err, &ee):
			got = ee.ExitCode()
		case errors.As(err, &re):
			got = re.Status.ExitStatus()
		default:
			fmt.Printf("run %d: %v\n", i, err)
			return 1
		}
		if got != want || out.String() != "out\n" {
			fmt.Printf("run %d: exit %d output %q, want exit %d output \"out\\n\"\n", i, got, out.String(), want)
			return 1
		}
	}
	// An orphan is still reaped, and Run's children left no waiter.
	r := activeReaper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.foreign) != 0 {
		fmt.Printf("%d of Run's children still waited for\n", len(r.foreign))
		return 1
	}
	return 0
}

// TestRunUnderTheReaper: with the reaper on (mariposa as PID 1), a command
// run by code outside this package (a volume hook, the upgrade's
// preflight) gets its own exit status, never ECHILD; plain cmd.Run, the
// mutation, loses some to the reaper.
func TestRunUnderTheReaper(t *testing.T) {
	for _, mode := range []string{"run", "plain"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "PROC_TEST_REAPER_RUN="+mode)
		out, err := cmd.CombinedOutput()
		switch {
		case mode == "run" && err != nil:
			t.Fatalf("Run under the reaper: %v\n%s", err, out)
		case mode == "plain" && err == nil:
			t.Errorf("cmd.Run under the reaper never lost a status in 300 runs: the test shows nothing")
		case mode == "plain":
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !strings.Contains(string(out), "no child processes") {
				t.Errorf("cmd.Run under the reaper failed otherwise than by ECHILD: %v\n%s", err, out)
			}
		}
	}
}
