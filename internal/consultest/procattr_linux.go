package consultest

import "syscall"

// agentProcAttr: the agent's own group, and death with the test binary so
// no agent outlives a crash. A gid other than 0 runs the agent in that group
// (still as root), which is how Cut tells its sockets from the others'.
func agentProcAttr(gid uint32) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if gid != 0 {
		a.Credential = &syscall.Credential{Uid: 0, Gid: gid, NoSetGroups: true}
	}
	return a
}
