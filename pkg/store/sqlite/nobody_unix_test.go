//go:build unix

package sqlite_test

import (
	"os/exec"
	"syscall"
)

// asNobody makes cmd run as the user nobody (uid and gid 65534).
func asNobody(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}
