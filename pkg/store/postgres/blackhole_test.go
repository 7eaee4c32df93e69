package postgres

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// holeProxy forwards connections to a PostgreSQL server and can black-hole one of them
// (blackhole): from then on it carries no byte either way and its server side is never
// closed, also when the client closes its end, as a network does that silently dropped the
// flow (a NAT's or a firewall's state for it lost, a partition). The server is not told: to
// it the client is only quiet. Each connection is known by its backend's pid, read from the
// server's BackendKeyData as the connection starts.
type holeProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*holeConn
}

type holeConn struct {
	c, up net.Conn
	pid   atomic.Uint32
	dead  atomic.Bool
}

func newHoleProxy(t *testing.T, upstream string) *holeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			hc := &holeConn{c: c, up: up}
			p.mu.Lock()
			p.conns = append(p.conns, hc)
			p.mu.Unlock()
			go hc.pipe(up, c, false)
			go hc.pipe(c, up, true)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, hc := range p.conns {
			hc.c.Close()
			hc.up.Close()
		}
	})
	return p
}

// pipe copies src to dst until src ends, then closes both ends, unless the connection is
// black-holed: then what it reads is dropped and nothing is closed. fromServer: src is the
// server, whose messages up to the first ReadyForQuery are read one by one for the pid.
func (hc *holeConn) pipe(dst io.Writer, src io.Reader, fromServer bool) {
	end := func() {
		if !hc.dead.Load() {
			hc.c.Close()
			hc.up.Close()
		}
	}
	defer end()
	if fromServer {
		head := make([]byte, 5)
		for {
			if _, err := io.ReadFull(src, head); err != nil {
				return
			}
			n := int(binary.BigEndian.Uint32(head[1:])) - 4
			if n < 0 {
				return
			}
			msg := make([]byte, 5+n)
			copy(msg, head)
			if _, err := io.ReadFull(src, msg[5:]); err != nil {
				return
			}
			if head[0] == 'K' && n >= 4 {
				hc.pid.Store(binary.BigEndian.Uint32(msg[5:9]))
			}
			if _, err := dst.Write(msg); err != nil {
				return
			}
			if head[0] == 'Z' {
				break
			}
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !hc.dead.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// blackhole black-holes the connection of backend pid.
func (p *holeProxy) blackhole(pid uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, hc := range p.conns {
		if hc.pid.Load() == pid {
			hc.dead.Store(true)
			return true
		}
	}
	return false
}

func (p *holeProxy) url(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// TestBlackholedTransactionReleasesTheIntent: the network stops carrying the bytes of a
// holder's connection, without closing it, while its commit's transaction holds the intent's
// lock (its first round trip answered, its COMMIT sent into the hole). The server, never
// told, keeps that backend waiting in the transaction. The holder's commit gives up; its
// retry, on a new connection, must get the intent's lock once the server has ended the
// silent transaction, and record the outcome, which a duplicate from another process then
// replays. Before, the silent backend kept the lock until the server's TCP keepalive gave up
// (never, here; over two hours with Linux's defaults): every retry and every duplicate
// waited for it and failed with a store_error.
func TestBlackholedTransactionReleasesTheIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testSchema(t)
	p := newHoleProxy(t, pgHost(t))
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	held, err := Open(octx, Config{URL: p.url(t), Schema: schema, MaxConns: 4})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	direct := openSchema(t, schema)
	holder := fence.New(held, fence.Config{Owner: "host-h:1:boot"})
	other := fence.New(direct, fence.Config{Owner: "host-o:1:boot", Liveness: func(string) fence.Liveness { return fence.CannotTell }})
	r := fence.Request{Intent: "blackholed:1", Tool: "charge", Args: []byte(`{"usd":1}`)}
	adm, err := holder.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatalf("claim: %+v %v", adm, err)
	}
	held.noSpeculation.Store(true) // the commit is a transaction: lock and read, then COMMIT
	var holed atomic.Bool
	held.hook = func(stage string, pid uint32) {
		if stage == "begin" && !holed.Load() {
			holed.Store(p.blackhole(pid))
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = holder.Commit(cctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
	cancel()
	held.hook = nil
	if !holed.Load() || err == nil {
		t.Fatalf("the commit through the black hole (black-holed: %v) answered %v", holed.Load(), err)
	}
	// The retry waits for the intent's lock: bounded by the server once it ends the silent
	// transaction, not by the test's patience.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cert, err := holder.Commit(rctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
	if err != nil {
		t.Fatalf("the holder's retry, the silent transaction holding the intent's lock: %v", err)
	}
	dup, err := other.Prepare(rctx, r)
	if err != nil || dup.Fresh() || dup.Cert == nil || dup.Cert.Hash != cert.Hash {
		t.Fatalf("a duplicate from another process: %+v %v, want the replay of %s", dup, err, cert.Hash)
	}
}
