//go:build unix && !linux

package mcpstdio

import (
	"os"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so Close can stop what it spawned
// (npx starts node, a shell starts its command). This OS has no parent-death signal: a child
// outlives a killed parent until it reads end-of-file on its stdin.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(p *os.Process, sig syscall.Signal) {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}

// ownGroup: the child leads a process group of its own (its pid).
const ownGroup = true
