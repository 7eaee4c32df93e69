package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// The benchmarks open both ledgers through the one opener (pkg/store), so PostgreSQL is
// compared with whatever the embedded file ledger is in this build, on the same machine:
//
//	go test -run '^$' -bench 'Ledger' -benchtime 2000x ./pkg/store/postgres/
//
// Each op is one admission plus its commit of a distinct intent (or, for Replay, one
// duplicate of a done intent), run by 1 or 16 concurrent callers. ns/op is the inverse of
// throughput; p50-µs and p99-µs are the latency of one op as a caller sees it.

func openPostgresLedger(b *testing.B) *store.Ledger {
	raw := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
	if raw == "" {
		b.Skip("SKIP-REQUIRED: EFFECTFENCE_TEST_POSTGRES is not set")
	}
	schema := fmt.Sprintf("effectfence_bench_%d_%d", os.Getpid(), time.Now().UnixNano())
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	ctx := context.Background()
	led, err := store.Open(ctx, store.Options{Ledger: u.String()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		led.Close()
		conn, err := pgx.Connect(ctx, raw)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			b.Error(err)
		}
	})
	return led
}

func openFileLedger(b *testing.B) *store.Ledger {
	led, err := store.Open(context.Background(), store.Options{Ledger: filepath.Join(b.TempDir(), "bench.db")})
	if err != nil {
		b.Skipf("no file ledger in this build to compare with: %v", err)
	}
	b.Cleanup(func() { led.Close() })
	return led
}

var benchRun atomic.Int64

// run splits b.N ops over callers goroutines and reports latency percentiles.
func run(b *testing.B, callers int, op func(i int) error) {
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func benchLedgers(b *testing.B, fn func(b *testing.B, e *fence.Engine, callers int)) {
	for _, l := range []struct {
		name string
		open func(*testing.B) *store.Ledger
	}{{"postgres", openPostgresLedger}, {"file", openFileLedger}} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/callers=%d", l.name, callers), func(b *testing.B) {
				fn(b, l.open(b).Engine, callers)
			})
		}
	}
}

func BenchmarkLedgerAdmitCommit(b *testing.B) {
	benchLedgers(b, func(b *testing.B, e *fence.Engine, callers int) {
		ctx := context.Background()
		prefix := fmt.Sprintf("bench:%d:", benchRun.Add(1))
		run(b, callers, func(i int) error {
			adm, err := e.Prepare(ctx, fence.Request{Intent: prefix + fmt.Sprint(i), Tool: "charge_card", Args: []byte(`{"amount":4900}`)})
			if err != nil {
				return err
			}
			_, err = e.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
			return err
		})
	})
}

// BenchmarkLedgerAdmitCommitHotDomain: every op takes the next number of one shared domain,
// the one place where admissions must take turns.
func BenchmarkLedgerAdmitCommitHotDomain(b *testing.B) {
	benchLedgers(b, func(b *testing.B, e *fence.Engine, callers int) {
		ctx := context.Background()
		prefix := fmt.Sprintf("bench:%d:", benchRun.Add(1))
		run(b, callers, func(i int) error {
			adm, err := e.Prepare(ctx, fence.Request{Intent: prefix + fmt.Sprint(i), Tool: "charge_card", Args: []byte(`{"amount":4900}`), Domain: "acct:hot"})
			if err != nil {
				return err
			}
			_, err = e.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
			return err
		})
	})
}

func BenchmarkLedgerReplay(b *testing.B) {
	benchLedgers(b, func(b *testing.B, e *fence.Engine, callers int) {
		ctx := context.Background()
		r := fence.Request{Intent: "bench:replay", Tool: "charge_card", Args: []byte(`{"amount":4900}`)}
		adm, err := e.Prepare(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`)); err != nil {
			b.Fatal(err)
		}
		run(b, callers, func(int) error {
			adm, err := e.Prepare(ctx, r)
			if err == nil && adm.Fresh() {
				err = fmt.Errorf("a duplicate was admitted")
			}
			return err
		})
	})
}

// BenchmarkServerFloor measures the server on this machine without the fence: one round trip
// (SELECT 1), one durable commit (an INSERT in its own transaction), and the durable work of a
// fresh call (fresh, fresh16: two commits).
func BenchmarkServerFloor(b *testing.B) {
	raw := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
	if raw == "" {
		b.Skip("SKIP-REQUIRED: EFFECTFENCE_TEST_POSTGRES is not set")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	b.Run("roundtrip", func(b *testing.B) {
		for b.Loop() {
			if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("commit", func(b *testing.B) {
		// A row in a real (logged) table, in a schema of its own, so the commit flushes WAL.
		schema := fmt.Sprintf("effectfence_floor_%d", os.Getpid())
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".probe (i int)"); err != nil {
			b.Fatal(err)
		}
		defer conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		for b.Loop() {
			if _, err := conn.Exec(ctx, "INSERT INTO "+schema+".probe VALUES (1)", pgx.QueryExecModeSimpleProtocol); err != nil {
				b.Fatal(err)
			}
		}
	})
	// commit16 is the same durable INSERT from 16 callers on 16 connections (b.N in total):
	// the bare server's scaling, against which the ledger's 16-caller figure is compared.
	b.Run("commit16", func(b *testing.B) {
		schema := fmt.Sprintf("effectfence_floor16_%d", os.Getpid())
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".probe (i int)"); err != nil {
			b.Fatal(err)
		}
		defer conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		const callers = 16
		idle := make(chan *pgx.Conn, callers) // a caller takes a connection of its own per op
		for range callers {
			c, err := pgx.Connect(ctx, raw)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(ctx)
			idle <- c
		}
		run(b, callers, func(int) error {
			c := <-idle
			defer func() { idle <- c }()
			_, err := c.Exec(ctx, "INSERT INTO "+schema+".probe VALUES (1)", pgx.QueryExecModeSimpleProtocol)
			return err
		})
	})
	// fresh and fresh16 are the durable work of one fresh fenced call without the fence, at 1
	// and 16 callers: a claim-sized row inserted and committed, then that row updated with an
	// outcome-sized body and committed. Two round trips and two WAL flushes, the floor of the
	// ledger's admission + commit (BenchmarkLedgerAdmitCommit), which must commit the claim
	// before the call runs and the outcome before it is answered.
	b.Run("fresh", func(b *testing.B) { benchFreshFloor(b, raw, 1) })
	b.Run("fresh16", func(b *testing.B) { benchFreshFloor(b, raw, 16) })
}

// Record bodies as large as the ledger's for the benchmark's call: an in-flight claim and a
// done outcome (JSON of fence.Record).
const floorClaimBytes, floorOutcomeBytes = 480, 860

func benchFreshFloor(b *testing.B, raw string, callers int) {
	run(b, callers, freshFloor(b, raw, callers))
}

// freshFloor prepares the bare durable work of a fresh call for callers concurrent callers and
// returns one op of it.
func freshFloor(b *testing.B, raw string, callers int) func(i int) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		b.Fatal(err)
	}
	schema := fmt.Sprintf("effectfence_fresh%d_%d_%d", callers, os.Getpid(), benchRun.Add(1))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".probe (intent text PRIMARY KEY, body bytea NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			b.Error(err)
		}
		conn.Close(ctx)
	})
	idle := make(chan *pgx.Conn, callers) // a caller takes a connection of its own per op
	for range callers {
		c, err := pgx.Connect(ctx, raw)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close(ctx) })
		idle <- c
	}
	claim := bytes.Repeat([]byte("c"), floorClaimBytes)
	outcome := bytes.Repeat([]byte("o"), floorOutcomeBytes)
	insert := "INSERT INTO " + schema + ".probe (intent, body) VALUES ($1, $2)"
	update := "UPDATE " + schema + ".probe SET body = $2 WHERE intent = $1"
	prefix := fmt.Sprintf("bench:%d:", benchRun.Add(1))
	return func(i int) error {
		c := <-idle
		defer func() { idle <- c }()
		intent := prefix + strconv.Itoa(i)
		if _, err := c.Exec(ctx, insert, intent, claim); err != nil {
			return err
		}
		ct, err := c.Exec(ctx, update, intent, outcome)
		if err == nil && ct.RowsAffected() != 1 {
			err = fmt.Errorf("the outcome updated %d rows", ct.RowsAffected())
		}
		return err
	}
}

// BenchmarkLedgerOverFloor measures the ledger's fresh call against its floor in one run: every
// op is a fresh call through the PostgreSQL ledger (admission + commit) and, right after it on
// the same caller, the same durable work done bare (ServerFloor/fresh), so both meet the same
// load on a shared machine. It reports each one's mean latency (ledger-µs, floor-µs) and their
// ratio (x-floor: ledger time over floor time, summed over all ops), at 1 and 16 callers;
// ns/op, ops/s and the percentiles are of the pair.
func BenchmarkLedgerOverFloor(b *testing.B) {
	raw := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
	if raw == "" {
		b.Skip("SKIP-REQUIRED: EFFECTFENCE_TEST_POSTGRES is not set")
	}
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			e := openPostgresLedger(b).Engine
			floor := freshFloor(b, raw, callers)
			ctx := context.Background()
			prefix := fmt.Sprintf("bench:%d:", benchRun.Add(1))
			var ledgerNs, floorNs atomic.Int64
			run(b, callers, func(i int) error {
				t0 := time.Now()
				adm, err := e.Prepare(ctx, fence.Request{Intent: prefix + strconv.Itoa(i), Tool: "charge_card", Args: []byte(`{"amount":4900}`)})
				if err != nil {
					return err
				}
				if _, err := e.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`)); err != nil {
					return err
				}
				t1 := time.Now()
				if err := floor(i); err != nil {
					return err
				}
				ledgerNs.Add(int64(t1.Sub(t0)))
				floorNs.Add(int64(time.Since(t1)))
				return nil
			})
			b.ReportMetric(float64(ledgerNs.Load())/float64(b.N)/1e3, "ledger-µs")
			b.ReportMetric(float64(floorNs.Load())/float64(b.N)/1e3, "floor-µs")
			b.ReportMetric(float64(ledgerNs.Load())/float64(floorNs.Load()), "x-floor")
		})
	}
}
