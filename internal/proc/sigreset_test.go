//go:build linux

package proc

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A child started after ResetIgnoredSignals has nothing ignored, even when
// this process inherited ignored signals.
func TestResetIgnoredSignals(t *testing.T) {
	if os.Getenv("PROC_RESET_HELPER") == "1" {
		ResetIgnoredSignals()
		p, err := Start(Spec{Argv: []string{"sh", "-c", "grep SigIgn /proc/self/status"}, Output: NewSink(8, func(l Line) { os.Stdout.WriteString(l.Text + "\n") }, nil)})
		if err != nil {
			os.Exit(2)
		}
		p.Exit()
		<-p.OutputDone()
		return
	}
	// Run ourselves with SIGUSR2 and signal 34 ignored, as a parent might.
	cmd := exec.Command("sh", "-c", `trap "" USR2 34; exec "$0" -test.run '^TestResetIgnoredSignals$'`, os.Args[0])
	cmd.Env = append(os.Environ(), "PROC_RESET_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SigIgn:\t0000000000000000") {
		t.Fatalf("child still ignores signals:\n%s", out)
	}
	_ = syscall.SIGUSR2
}
