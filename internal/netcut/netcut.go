// Package netcut is a TCP proxy that tests put in front of a database to cut it: Cut drops
// every connection through the proxy and refuses new ones for a while, as a network partition
// or a database restart would. The history checker's nemesis and the outage tests share it.
package netcut

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection to its upstream until it is cut.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	cutUntil time.Time
	wg       sync.WaitGroup
}

// New starts a proxy on a free loopback port in front of upstream (host:port).
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
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
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

func (p *Proxy) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
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

// Heal ends a cut early.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cutUntil = time.Time{}
	p.mu.Unlock()
}

// Close stops the proxy and drops every connection through it.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
