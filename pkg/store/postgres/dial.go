package postgres

import (
	"net"
	"syscall"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// unacknowledged is how long a connection of the store may leave what it sent unacknowledged
// by the server's host before the kernel gives the connection up (TCP_USER_TIMEOUT, Linux),
// and how long a connect may take where the URL sets no connect_timeout: a third of the
// lease, from 1 s (the least a renewal's try is given) to 20 s (a third of the default lease).
// A network that drops a connection's packets without a reset (a partition, a NAT or a
// firewall that lost the flow's state, a failover that moved the server's address) held what
// was sent on it while the kernel retransmitted, about 15 min under Linux's defaults: a claim,
// which had no deadline of its own in wrap before 2026-12-06, waited as long, and was admitted whenever the
// network came back; where the server had run it and the network held only its answer, its
// lease had been running since, perhaps lapsed, its call perhaps taken over elsewhere. A claim
// whose connection so fails within a third of the lease is refused (not run) while a
// call admitted on it has two thirds of the lease left for its renewals, as a renewal's tries
// have. Only bytes the server's kernel does not acknowledge count: a query the server is
// slow to answer (a lock wait, a long statement) is not ended by it.
func unacknowledged(lease time.Duration) time.Duration {
	if lease <= 0 {
		lease = fence.DefaultLeaseTTL
	}
	return min(max(lease/3, time.Second), 20*time.Second)
}

// dialer makes the store's connections: a connect ends after connect, and a connection is
// given up once what it sent has gone unacknowledged for unacked (userTimeout) or, idle, once
// unacked has passed without an answer to TCP keepalive probes sent from unacked on, so that
// a pooled connection the network dropped is gone before a call is handed it.
func dialer(connect, unacked time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: connect,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     unacked,
			Interval: max(unacked/3, time.Second),
			Count:    3,
		},
		Control: func(network, _ string, c syscall.RawConn) error {
			return userTimeout(network, c, unacked)
		},
	}
}
