//go:build !linux

package consultest

import "syscall"

// agentProcAttr: the agent's own group (no parent-death signal here, and no
// group of its own: Cut is Linux-only).
func agentProcAttr(uint32) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
