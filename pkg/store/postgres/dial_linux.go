package postgres

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeout sets TCP_USER_TIMEOUT on a TCP socket: the kernel closes the connection once
// bytes it sent have gone unacknowledged for d (and an idle one whose keepalive probes go
// unanswered for d), where it would otherwise retransmit for about 15 min (tcp_retries2).
func userTimeout(network string, c syscall.RawConn, d time.Duration) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil // a Unix socket: no network to lose
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT on the connection to the ledger: %w", serr)
	}
	return nil
}
