package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mariposa-sh/mariposa/internal/proc"
)

// hookWaitDelay bounds how long a killed hook's pipes are waited for.
var hookWaitDelay = 2 * time.Second

// runHook runs a snapshot or restore hook in dir, in a process group of
// its own, as the volume's user (WithRunAs), with env (nil: mariposa's environment) and
// MARIPOSA_VOLUME_DIR=dir. When ctx ends the whole group is killed; when
// the hook returns, whatever it left running in its group is killed too,
// so nothing it started writes the directory once it is in place.
func runHook(ctx context.Context, log hclog.Logger, what string, argv, env []string, dir string) error {
	if env == nil {
		env = os.Environ()
	}
	env = append(env[:len(env):len(env)], "MARIPOSA_VOLUME_DIR="+dir)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = hookAttr(ctx)
	out := &tail{max: 4096}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = hookWaitDelay
	start := time.Now()
	err := proc.Run(cmd) // as PID 1 too (the reaper)
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	log.Debug("volume: hook ran", "hook", what, "argv", argv, "dir", dir, "took", time.Since(start), "err", err, "output", out.String())
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("%s hook %q", what, argv)
	if cerr := ctx.Err(); cerr != nil {
		err = fmt.Errorf("%s killed after %s: %w", msg, time.Since(start).Round(time.Millisecond), cerr)
	} else {
		var ee *exec.ExitError
		var re *proc.ReapedExit
		switch {
		case errors.As(err, &ee):
			err = fmt.Errorf("%s failed: %s", msg, ee.ProcessState)
		case errors.As(err, &re):
			err = fmt.Errorf("%s failed: %s", msg, re)
		default:
			err = fmt.Errorf("%s: %w", msg, err)
		}
	}
	if o := strings.TrimSpace(out.String()); o != "" {
		err = fmt.Errorf("%w; its output ends with: %s", err, o)
	}
	return err
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
