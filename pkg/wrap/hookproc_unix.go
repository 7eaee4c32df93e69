//go:build unix

package wrap

import (
	"os/exec"
	"syscall"
)

// hookGroup runs a hook command in a process group of its own and has its cancellation (the
// delivery's timeout, wrap's exit) kill the whole group: what the command started (the curl
// under a shell) ends with it, as wrap's MCP server does (mcpstdio).
func hookGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
}
