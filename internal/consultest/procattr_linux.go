package consultest

import "syscall"

// agentProcAttr: the agent's own group, and death with the test binary so
// no agent outlives a crash.
func agentProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
