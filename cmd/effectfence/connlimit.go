package main

import (
	"net"
	"net/http"
	"sync"
)

// connLimit is a listener that holds at most max connections open at once, so that clients
// cannot take the file descriptors the ledger, the spool and the servers' pipes and
// connections need: once max are open, Accept first closes the connection that has been
// idle longest between requests (a keep-alive connection, which its client reopens when it
// needs one), and with none idle waits for one to close. Connections not yet accepted wait in
// the kernel's queue and hold no descriptor of the process.
type connLimit struct {
	net.Listener
	slots  chan struct{} // one per open connection
	closed chan struct{}
	close  sync.Once

	mu   sync.Mutex
	idle []*limitedConn // idle between requests, longest idle first
	// wentIdle is signalled (buffer 1) when a connection goes idle, for an Accept that found
	// every slot taken and none idle.
	wentIdle chan struct{}
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, slots: make(chan struct{}, max), closed: make(chan struct{}), wentIdle: make(chan struct{}, 1)}
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *connLimit) Close() error {
	l.close.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *connLimit) Accept() (net.Conn, error) {
	if err := l.take(); err != nil {
		return nil, err
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, l: l}, nil
}

// take takes a slot, closing the connection idle longest when every slot is taken. With none
// idle it waits until a connection closes or one goes idle (and is closed then): before, it
// waited for a close alone, and connections that went idle after it looked (a flood of
// keep-alive connections still being answered) were never closed, so a new agent waited as
// long as the flood stayed connected (TestConnectionFloodLeavesTheFenceItsFiles, under load).
func (l *connLimit) take() error {
	for {
		select {
		case l.slots <- struct{}{}:
			return nil
		default:
		}
		if c := l.oldestIdle(); c != nil {
			_ = c.Close() // gives its slot back
			continue
		}
		select {
		case l.slots <- struct{}{}:
			return nil
		case <-l.wentIdle:
		case <-l.closed:
			return net.ErrClosed
		}
	}
}

// oldestIdle takes the connection idle longest out of the idle list.
func (l *connLimit) oldestIdle() *limitedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.idle) == 0 {
		return nil
	}
	c := l.idle[0]
	l.idle = l.idle[1:]
	return c
}

// connState is the http.Server's ConnState: it keeps the list of idle connections.
func (l *connLimit) connState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, x := range l.idle {
		if x == lc {
			l.idle = append(l.idle[:i], l.idle[i+1:]...)
			break
		}
	}
	if s == http.StateIdle {
		l.idle = append(l.idle, lc)
		select {
		case l.wentIdle <- struct{}{}:
		default:
		}
	}
}

// limitedConn gives its slot back when it is closed, once.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.slots })
	return err
}
