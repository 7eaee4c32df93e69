//go:build !unix

package mcptest

// stopSelf does nothing where there is no SIGSTOP.
func stopSelf() {}
