//go:build unix

package mcpstdio

import (
	"os"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so Close can stop what it spawned
// (npx starts node, a shell starts its command).
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(p *os.Process, sig syscall.Signal) {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}
