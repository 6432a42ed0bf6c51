//go:build !linux

package proc

import "errors"

func startSpecial(r *startReq, umask int, nnp bool) error {
	return errors.New("a umask of its own or no_new_privs needs Linux")
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
