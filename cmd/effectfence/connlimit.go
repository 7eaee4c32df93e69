package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
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
	open map[*limitedConn]struct{}
	// wentIdle is signalled (buffer 1) when a connection goes idle, for an Accept that found
	// every slot taken and none idle.
	wentIdle chan struct{}

	// heads counts the bytes of request heads (request line and headers) being received on
	// every connection at once; headMax bounds them (headBudget).
	heads   atomic.Int64
	headMax int64
}

// headBudget bounds the request heads all clients may have in flight at once. A head is read
// whole before any handler runs, so before the keys are checked: one of 1 MiB (the server's
// limit) held about 2 MB of the gateway's memory while it came in, for up to headerTimeout,
// and 200 connections sending unfinished ones took the gateway from 24 to 430 MB resident,
// bounded only by --max-conns. Past the budget the connection receiving the largest head is
// closed (the one whose read would exceed it, when no other's head is larger), without an
// answer: it asked for nothing yet, so nothing ran, and its client may connect again. Before,
// the one whose read came when the budget was full was closed, so a flood of large unfinished
// heads closed every ordinary client's too.
const headBudget = 32 << 20

// errHeadBudget ends a connection whose request head does not fit in headBudget.
var errHeadBudget = errors.New("the request heads being received on all connections are over their budget")

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, slots: make(chan struct{}, max), closed: make(chan struct{}), wentIdle: make(chan struct{}, 1), headMax: headBudget, open: map[*limitedConn]struct{}{}}
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
	lc := &limitedConn{Conn: c, l: l}
	l.mu.Lock()
	l.open[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

// largestHead is the open connection other than not receiving the largest request head,
// if that is larger than than bytes.
func (l *connLimit) largestHead(not *limitedConn, than int64) *limitedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	var largest *limitedConn
	for c := range l.open {
		if h := c.head.Load(); c != not && h > than {
			largest, than = c, h
		}
	}
	return largest
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
	if s != http.StateActive {
		lc.headDone(false) // idle, hijacked or closed: a new head starts at 0
	}
	if s == http.StateIdle {
		l.idle = append(l.idle, lc)
		select {
		case l.wentIdle <- struct{}{}:
		default:
		}
	}
}

// limitedConn gives its slot back when it is closed, once, and counts what it reads of a
// request head in its listener's heads.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once

	mu sync.Mutex
	// handling: a handler runs for the request whose head was read: what is read now is its
	// body (or the start of the next request, read ahead), not counted.
	handling bool
	// shut: the connection was closed, or closed for its head (closeForHead): nothing read
	// on it counts any more, and the handler of the head it was receiving does not run.
	shut bool
	// head is the bytes of the head being read, counted in l.heads: written under mu, read
	// by another connection's count too.
	head atomic.Int64
}

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.count(int64(n)) {
		// A read error the server takes for the client's: it closes the connection without
		// an answer (none is due: nothing was asked yet), and logs nothing.
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errHeadBudget}
	}
	return n, err
}

// count adds n bytes just read to the head being read, if one is. Past the budget it closes
// the connection receiving the largest head, larger than this one's would be, and tries
// again; it reports false when none is, and this connection is the one to close.
func (c *limitedConn) count(n int64) bool {
	for {
		c.mu.Lock()
		if c.shut {
			c.mu.Unlock()
			return false
		}
		if c.handling {
			c.mu.Unlock()
			return true
		}
		if c.l.heads.Add(n) <= c.l.headMax {
			c.head.Add(n)
			c.mu.Unlock()
			return true
		}
		c.l.heads.Add(-n)
		mine := c.head.Load() + n
		c.mu.Unlock()
		// Not under c.mu: the other connection's Close takes its own.
		largest := c.l.largestHead(c, mine)
		if largest == nil {
			return false
		}
		largest.closeForHead(mine) // gives its head back, unless its handler started since
	}
}

// closeForHead closes c if it is still receiving a head larger than than: decided under c.mu,
// so that a connection whose handler started (headDone(true)) after largestHead chose it is
// not closed under its request, and one closed here runs no handler.
func (c *limitedConn) closeForHead(than int64) {
	c.mu.Lock()
	if c.shut || c.handling || c.head.Load() <= than {
		c.mu.Unlock()
		return
	}
	c.shut = true
	c.l.heads.Add(-c.head.Swap(0))
	// Closed before c.mu is let go: a headsRead that sees shut finds nothing to answer on.
	_ = c.Conn.Close()
	c.mu.Unlock()
	_ = c.Close() // its slot and its place among the open connections
}

// headDone gives back what the connection's head holds of the budget: its handler starts
// (handling), or the connection goes idle or closes. It reports false when the connection
// was closed for its head: then no handler may run.
func (c *limitedConn) headDone(handling bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l.heads.Add(-c.head.Swap(0))
	c.handling = handling && !c.shut
	return !c.shut
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		<-c.l.slots
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
	})
	c.mu.Lock()
	c.shut = true // a read that returned before the close is not counted after it
	c.mu.Unlock()
	c.headDone(false)
	return err
}

// connKey is the request context's key of the connection it came on (connContext).
type connKey struct{}

// connContext is the http.Server's ConnContext: the request's context names its connection,
// for headsRead.
func (l *connLimit) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// headsRead is h, after which the request's head no longer counts in the budget: the server
// has read it whole.
func (l *connLimit) headsRead(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok && !lc.headDone(true) {
			// Closed for its head before its handler started: nothing runs, and no answer is
			// written (the server closes the connection and logs nothing).
			panic(http.ErrAbortHandler)
		}
		h.ServeHTTP(w, r)
	})
}
