// Package netcut is a TCP proxy that tests put in front of a database to cut it: Cut drops
// every connection through the proxy and refuses new ones for a while, as a network partition
// or a database restart would; Freeze holds every byte without closing anything, as a
// stopped database or a black-holed network would. The history checker's nemesis and the
// outage tests share it.
package netcut

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards every connection to its upstream until it is cut.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	cutUntil time.Time
	frozen   bool
	thaw     *sync.Cond // on mu: frozen ended, or frozenBelow
	// accepted numbers the connections from 1 as they are accepted; those numbered below
	// frozenBelow are frozen (FreezeOpen).
	accepted    int64
	frozenBelow int64
	wg          sync.WaitGroup

	// A NewPostgres proxy's (pgwire.go): round trips counted, and the one whose answer is
	// to be lost (0: none) with how long the database is then away.
	pg       bool
	trips    atomic.Int64
	lost     atomic.Int64
	loseAt   int64
	loseDown time.Duration
	loseLook func() // called as the chosen answer is dropped (LoseAnswerAnd)
	holdAt   int64  // the round trip whose answer freezes the proxy (HoldAnswer; 0: none)
}

// New starts a proxy on a free loopback port in front of upstream (host:port).
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return Serve(ln, upstream), nil
}

// Serve starts a proxy that takes the connections ln accepts (a listener made elsewhere: in
// another network namespace, say) to upstream. Close closes ln.
func Serve(ln net.Listener, upstream string) *Proxy {
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.thaw = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := time.Now().Before(p.cutUntil)
		p.accepted++
		n := p.accepted
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c, n)
		}()
	}
}

// pipe forwards connection n.
func (p *Proxy) pipe(c net.Conn, n int64) {
	p.waitThaw(n)
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	p.mu.Lock()
	pg := p.pg
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _ = p.copy(up, c, n); done <- struct{}{} }()
	go func() {
		if pg {
			_ = p.pgAnswers(c, up, n, c, up)
		} else {
			_ = p.copy(c, up, n)
		}
		done <- struct{}{}
	}()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// copy is io.Copy for connection n that holds what it read while n is frozen.
func (p *Proxy) copy(dst io.Writer, src io.Reader, n int64) error {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			p.waitThaw(n)
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// waitThaw waits while connection n is frozen.
func (p *Proxy) waitThaw(n int64) {
	p.mu.Lock()
	for p.frozen || n < p.frozenBelow {
		p.thaw.Wait()
	}
	p.mu.Unlock()
}

// Freeze holds every byte through the proxy, on open connections and new ones (accepted, but
// not forwarded), closing nothing, until Heal.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// FreezeOpen holds every byte of the connections open now, closing nothing, until Heal, and
// forwards new ones: a proxy in front of a server that failed over, holding its clients' old
// connections to the old server while new ones reach the new, or a network that lost the
// state of the flows it carried.
func (p *Proxy) FreezeOpen() {
	p.mu.Lock()
	p.frozenBelow = p.accepted + 1
	p.mu.Unlock()
}

// track registers both ends, unless a cut began meanwhile (then it closes them).
func (p *Proxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.cutUntil) {
		c.Close()
		up.Close()
		return false
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	return true
}

// Cut drops every connection now and refuses new ones for d.
func (p *Proxy) Cut(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := time.Now().Add(d); until.After(p.cutUntil) {
		p.cutUntil = until
	}
	for c := range p.conns {
		c.Close()
	}
}

// Heal ends a cut early, and a freeze.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cutUntil = time.Time{}
	p.frozen, p.frozenBelow = false, 0
	p.thaw.Broadcast()
	p.mu.Unlock()
}

// Close stops the proxy and drops every connection through it.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.frozen, p.frozenBelow = false, 0 // what waits to forward goes on, into closed connections
	p.thaw.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
