//go:build !linux

package sqlite

import "os"

// checkMountedAlone is a Linux check (see mount_linux.go): elsewhere nothing is refused.
func checkMountedAlone(string) error { return nil }

// checkOtherName is a Linux check (see holders_linux.go): elsewhere nothing is refused.
func checkOtherName(string) error { return nil }

// foreignLogUser is a Linux look (see holders_linux.go): elsewhere no process is seen using a
// log.
func foreignLogUser(string) int { return 0 }

// replacedIndexUser is a Linux look (see holders_linux.go): elsewhere no process is seen using
// a replaced index.
func replacedIndexUser(string) int { return 0 }

// fileNow is a Linux look (see holders_linux.go): elsewhere the moved file is not found.
func fileNow(os.FileInfo) os.FileInfo { return nil }
