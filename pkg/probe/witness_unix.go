//go:build unix

package probe

import (
	"os/exec"
	"syscall"
)

// ownGroup runs cmd in a process group of its own and makes its cancellation kill the whole
// group: what the shell started (each command of a pipeline) ends with it, instead of running
// on after the witness timed out.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
