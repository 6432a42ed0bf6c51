//go:build !linux

package proc

import (
	"errors"
	"os"
)

// ServeForks runs run: forks stay on the caller's thread here.
func ServeForks(run func() int) int { return run() }

func onMain() bool                           { return false }
func startMain(r *startReq, umask int) error { return startOne(r) }
func forkMain(r *startReq, umask int) error  { return startOne(r) }

// ErrNoMainThread: see the Linux version.
var ErrNoMainThread = errors.New("an upgrade in place needs Linux")

// Exec is Linux only.
func Exec(path string, argv, envv []string, before func() error) error { return ErrNoMainThread }

func trampoline(cmdPath string, args []string) (string, []string, *os.File, *os.File, error) {
	return "", nil, nil, nil, errors.New("no_new_privs needs Linux")
}

func trampolineResult(r *os.File) error { return nil }
