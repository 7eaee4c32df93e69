//go:build !unix

package main

// openFileLimit is 0: the system sets no per-process limit on open files that Go can read.
func openFileLimit() int { return 0 }
