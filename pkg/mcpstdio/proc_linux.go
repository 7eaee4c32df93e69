package mcpstdio

import (
	"os"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so Close can stop what it spawned
// (npx starts node, a shell starts its command), and asks the kernel to SIGKILL the child when
// this process dies, so a child never outlives a parent killed with SIGKILL. (Linux sends the
// signal when the thread that started the child exits; Go ends a thread only when a goroutine
// locked to it returns, which this package never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(p *os.Process, sig syscall.Signal) {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}

// ownGroup: the child leads a process group of its own (its pid).
const ownGroup = true
