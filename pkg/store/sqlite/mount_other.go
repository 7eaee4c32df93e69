//go:build !linux

package sqlite

// checkMountedAlone is a Linux check (see mount_linux.go): elsewhere nothing is refused.
func checkMountedAlone(string) error { return nil }

// checkOtherName is a Linux check (see holders_linux.go): elsewhere nothing is refused.
func checkOtherName(string) error { return nil }
