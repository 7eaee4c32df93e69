//go:build !unix

package probe

import "os/exec"

// ownGroup leaves cmd as it is: the shell alone is killed at the timeout.
func ownGroup(*exec.Cmd) {}
