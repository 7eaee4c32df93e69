//go:build !linux

package sqlite_test

import "os/exec"

// killTree kills cmd (processes under a prefix are Linux's tests' alone).
func killTree(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}
