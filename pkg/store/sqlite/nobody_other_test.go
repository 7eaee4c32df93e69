//go:build !unix

package sqlite_test

import "os/exec"

// asNobody is never called here: only root (Unix) re-runs a test as nobody.
func asNobody(*exec.Cmd) { panic("asNobody: not on Unix") }
