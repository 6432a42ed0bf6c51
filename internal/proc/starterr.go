package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// StartError is a failure to start a process. Permanent errors (a missing
// program or working directory, no permission to execute, not an
// executable) will not go away by trying again at once; the supervisor
// treats them differently from a crash.
type StartError struct {
	Err       error
	Permanent bool
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// preflight names what fork/exec would report misleadingly: a missing
// working directory fails as "fork/exec PROGRAM: no such file or
// directory", blaming a program that exists.
func preflight(spec Spec) error {
	if spec.Dir == "" {
		return nil
	}
	fi, err := os.Stat(spec.Dir)
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist):
		return &StartError{Err: fmt.Errorf("working directory %s does not exist", spec.Dir), Permanent: true}
	case err != nil:
		return &StartError{Err: fmt.Errorf("working directory %s: %w", spec.Dir, unwrapPath(err)), Permanent: true}
	case !fi.IsDir():
		return &StartError{Err: fmt.Errorf("working directory %s is not a directory", spec.Dir), Permanent: true}
	}
	return nil
}

// classify turns exec's error into one that says what is wrong.
func classify(spec Spec, err error) error {
	prog := spec.Argv[0]
	var ee *exec.Error
	if errors.As(err, &ee) && errors.Is(ee.Err, exec.ErrNotFound) {
		return &StartError{Err: fmt.Errorf("command %q not found in PATH", prog), Permanent: true}
	}
	where := prog
	if strings.Contains(prog, "/") && !filepath.IsAbs(prog) && spec.Dir != "" {
		where = filepath.Join(spec.Dir, prog)
	}
	switch {
	case errors.Is(err, syscall.ENOENT):
		return &StartError{Err: fmt.Errorf("command %s does not exist", where), Permanent: true}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &StartError{Err: fmt.Errorf("command %s is not executable (permission denied)", where), Permanent: true}
	case errors.Is(err, syscall.ENOEXEC):
		return &StartError{Err: fmt.Errorf("command %s is not an executable this system can run (exec format error)", where), Permanent: true}
	case errors.Is(err, syscall.ENOTDIR):
		return &StartError{Err: fmt.Errorf("command %s: a path component is not a directory", where), Permanent: true}
	}
	return &StartError{Err: err}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
