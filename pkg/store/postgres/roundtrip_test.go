package postgres_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// roundTripProxy forwards TCP connections to the PostgreSQL server and counts the server's
// ReadyForQuery messages: the server sends exactly one at the end of every simple query and
// of every extended-protocol Sync, so the count is the number of round trips clients waited
// for (pgx sends a batch as one pipeline with one Sync).
type roundTripProxy struct {
	ln    net.Listener
	trips atomic.Int64
	wg    sync.WaitGroup
}

func startRoundTripProxy(b *testing.B, target string) *roundTripProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := &roundTripProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Go(func() { io.Copy(s, c); s.Close() })
			p.wg.Go(func() { p.count(c, s); c.Close() })
		}
	})
	b.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// count copies the server's messages to the client, counting ReadyForQuery ('Z'). Every
// backend message is a type byte and a length (the connection must not use TLS).
func (p *roundTripProxy) count(client io.Writer, server io.Reader) {
	head := make([]byte, 5)
	body := make([]byte, 0, 8192)
	for {
		if _, err := io.ReadFull(server, head); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 {
			return
		}
		body = append(body[:0], make([]byte, n)...)
		if _, err := io.ReadFull(server, body); err != nil {
			return
		}
		if head[0] == 'Z' {
			p.trips.Add(1)
		}
		if _, err := client.Write(head); err != nil {
			return
		}
		if _, err := client.Write(body); err != nil {
			return
		}
	}
}

// proxiedURL points the test server's URL at the proxy, without TLS.
func proxiedURL(b *testing.B) (raw, target string, u *url.URL) {
	raw = os.Getenv("EFFECTFENCE_TEST_POSTGRES")
	if raw == "" {
		b.Skip("SKIP-REQUIRED: EFFECTFENCE_TEST_POSTGRES is not set")
	}
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	target = u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return raw, target, u
}

// BenchmarkRoundTrips counts the round trips of one admission + commit through the PostgreSQL
// ledger ("roundtrips/op"), against a bare pgx durable INSERT (one round trip) over the same
// proxy. The goal is at most 4.
func BenchmarkRoundTrips(b *testing.B) {
	raw, target, u := proxiedURL(b)
	ctx := context.Background()
	ledger := func(b *testing.B, req func(intent string) fence.Request) {
		p := startRoundTripProxy(b, target)
		schema := fmt.Sprintf("effectfence_rt_%d_%d", os.Getpid(), time.Now().UnixNano())
		lu := *u
		lu.Host = p.ln.Addr().String()
		q := lu.Query()
		q.Set("search_path", schema)
		lu.RawQuery = q.Encode()
		led, err := store.Open(ctx, store.Options{Ledger: lu.String()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			led.Close()
			if conn, err := pgx.Connect(ctx, raw); err == nil {
				conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				conn.Close(ctx)
			}
		})
		op := func(intent string) {
			adm, err := led.Engine.Prepare(ctx, req(intent))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := led.Engine.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`)); err != nil {
				b.Fatal(err)
			}
		}
		for i := range 5 { // statements prepared, connections open
			op(fmt.Sprintf("warm:%d", i))
		}
		start := p.trips.Load()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			op(fmt.Sprintf("rt:%d", i))
		}
		b.StopTimer()
		b.ReportMetric(float64(p.trips.Load()-start)/float64(b.N), "roundtrips/op")
	}
	b.Run("ledger", func(b *testing.B) {
		ledger(b, func(intent string) fence.Request {
			return fence.Request{Intent: intent, Tool: "charge_card", Args: []byte(`{"amount":4900}`)}
		})
	})
	// With a domain: its sequence number is read with the record and swapped with the claim.
	b.Run("ledger-domain", func(b *testing.B) {
		ledger(b, func(intent string) fence.Request {
			return fence.Request{Intent: intent, Tool: "charge_card", Args: []byte(`{"amount":4900}`), Domain: "acct:1"}
		})
	})
	b.Run("bare", func(b *testing.B) {
		p := startRoundTripProxy(b, target)
		bu := *u
		bu.Host = p.ln.Addr().String()
		conn, err := pgx.Connect(ctx, bu.String())
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(ctx)
		schema := fmt.Sprintf("effectfence_rtbare_%d", os.Getpid())
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".probe (i int)"); err != nil {
			b.Fatal(err)
		}
		defer conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		start := p.trips.Load()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := conn.Exec(ctx, "INSERT INTO "+schema+".probe VALUES (1)", pgx.QueryExecModeSimpleProtocol); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(p.trips.Load()-start)/float64(b.N), "roundtrips/op")
	})
}
