//go:build !linux

package proc

import "errors"

func startSpecial(r *startReq, umask int) error {
	return errors.New("a umask of its own needs Linux")
}

func setRlimits(pid int, limits []Rlimit) error {
	if len(limits) > 0 {
		return errors.New("rlimits need Linux")
	}
	return nil
}

// Rlimit resources (Linux's numbers; unused elsewhere).
const (
	RlimitNOFile = 7
	RlimitNProc  = 6
	RlimitCore   = 4
)
