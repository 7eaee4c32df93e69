//go:build !unix

package mcpstdio

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, _ syscall.Signal) { _ = p.Kill() }

// ownGroup: the child has no process group of its own here.
const ownGroup = false
