//go:build !linux

package sqlite_test

import "errors"

// The helper processes of the tests that run only on Linux (holder_test.go, queue_test.go),
// so that the tests build elsewhere.

var errLinuxOnly = errors.New("this helper process runs only on Linux")

func holderHelper() error           { return errLinuxOnly }
func queueHelper(mode string) error { return errLinuxOnly }
func openerHelper(string) string    { return errLinuxOnly.Error() }
