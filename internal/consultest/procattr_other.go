//go:build !linux

package consultest

import "syscall"

// agentProcAttr: the agent's own group (no parent-death signal here).
func agentProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
