//go:build !linux

package proc

// Successor: see the Linux version; nothing is armed elsewhere.
type Successor struct {
	Spec        Spec
	FailureOnly bool
	Ready       func() bool
}

// Arm: the main thread follows no exit here.
func (p *Process) Arm(s *Successor) bool { return false }

// Hold: nothing is armed here.
func (p *Process) Hold() bool { return false }

// Release: nothing is armed here.
func (p *Process) Release() {}

// Disarm: nothing is armed here.
func (p *Process) Disarm() bool { return false }

// Armed: never here.
func (p *Process) Armed() bool { return false }

// Next: nothing is started at an exit here.
func (p *Process) Next() (*Process, bool, error) { <-p.done; return nil, false, nil }
