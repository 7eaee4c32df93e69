//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// userTimeout does nothing here: TCP_USER_TIMEOUT is Linux's. A connection whose network drops
// its packets ends when the system's retransmissions give up; an idle one, when its keepalive
// probes go unanswered (dialer).
func userTimeout(string, syscall.RawConn, time.Duration) error { return nil }
