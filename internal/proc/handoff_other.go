//go:build !linux

package proc

import (
	"errors"
	"sync"
	"time"
)

var forkGate sync.RWMutex

// Handoff: see the Linux version.
type Handoff struct {
	Pid      int
	PidFD    int
	Out, Err int
	Started  time.Time
}

// Freeze: upgrades in place are Linux only.
func Freeze() (func(), error) { return nil, errors.New("an upgrade in place needs Linux") }

// Handoff: nothing to hand over here.
func (p *Process) Handoff() (Handoff, bool) { return Handoff{}, false }

// Fds: none.
func (h Handoff) Fds() []int { return nil }

// KeepOpen: Linux only.
func KeepOpen(fds []int) error { return errors.New("an upgrade in place needs Linux") }

// Adopt: Linux only.
func Adopt(h Handoff, output *Sink, name string, tap func(Line)) (*Process, error) {
	return nil, errors.New("an upgrade in place needs Linux")
}

// KillStrays: Linux only.
func KillStrays(known map[int]bool) []int { return nil }

// ExpectAdoption: Linux only.
func ExpectAdoption(pids []int) {}
