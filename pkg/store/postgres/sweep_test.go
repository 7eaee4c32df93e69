package postgres

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
)

// byteConn counts round trips, as tripConn does, and the bytes the server sent.
type byteConn struct {
	tripConn
	read *atomic.Int64
}

func (c *byteConn) Read(b []byte) (int, error) {
	n, err := c.tripConn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// TestSweepCostsRoundTripsPerBatch: a sweep costs a few round trips per batch of 1,000
// expired outcomes, whatever their number, and reads none of their bodies. Scanning and
// deleting them cost a round trip per record, each reading the record's body again under its
// lock: 2,500 records of 4 KB results cost over 2,500 round trips and 20 MB from the server.
func TestSweepCostsRoundTripsPerBatch(t *testing.T) {
	var trips, read atomic.Int64
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: testURL(t), Schema: testSchema(t), MaxConns: 1, wrapConn: func(c net.Conn) net.Conn {
		return &byteConn{tripConn: tripConn{Conn: c, trips: &trips}, read: &read}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const expired = 2500
	putBacklog(t, s, "rt", expired, 10, 5, 4096)
	e := fence.New(s, fence.Config{})
	t0, b0 := trips.Load(), read.Load()
	n, err := e.Sweep(ctx)
	if err != nil || n != expired {
		t.Fatalf("swept %d, %v; want %d", n, err, expired)
	}
	t.Logf("%d round trips, %d bytes read", trips.Load()-t0, read.Load()-b0)
	// Three batches (1,000, 1,000, 500) of four round trips each (the clock with BEGIN, the
	// candidates, the deletion, COMMIT), the old audit events with the last one, and the
	// preparation of statements this connection had not run before.
	if got := trips.Load() - t0; got > 20 {
		t.Errorf("sweeping %d expired outcomes took %d round trips; want at most 20", expired, got)
	}
	if got := read.Load() - b0; got > 100*expired {
		t.Errorf("sweeping %d expired outcomes of 4 KB results read %d bytes from the server; want at most 100 a record (their intents)", expired, got)
	}
}

// TestSweepSkipsARecordBeingDecided: a sweep leaves an expired outcome whose intent another
// transaction holds (it read the record and may write it again), without waiting for it; the
// other transaction's write stands.
func TestSweepSkipsARecordBeingDecided(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	putBacklog(t, s, "busy", 3, 0, 0, 10)
	const busy = "busy:old:000001"
	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	defer let()
	var later time.Time
	decided := make(chan error, 1)
	go func() {
		decided <- s.Update(ctx, func(tx fence.Tx) error {
			rec, err := tx.Get(busy)
			if err != nil || rec == nil {
				return errors.Join(err, errors.New("no record"))
			}
			heldOnce.Do(func() { close(held) })
			<-release
			again := *rec
			again.ExpiresAt = tx.Now().Add(time.Hour)
			later = again.ExpiresAt
			return tx.Put(&again)
		})
	}()
	<-held
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := fence.New(s, fence.Config{}).Sweep(sctx)
	if err != nil || n != 2 {
		t.Fatalf("sweep while %s is held = %d, %v; want the other 2, without waiting", busy, n, err)
	}
	var rows int
	if err := admin(t, s.schema).QueryRow(ctx, "SELECT count(*) FROM effectfence_records WHERE intent = $1", busy).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%s while held: %d rows, %v; want its record kept", busy, rows, err)
	}
	let()
	if err := <-decided; err != nil {
		t.Fatal(err)
	}
	rec, err := fence.New(s, fence.Config{}).Status(ctx, busy)
	if err != nil || rec.State != fence.StateDone || !rec.ExpiresAt.Equal(later) {
		t.Fatalf("%s after its transaction: %+v, %v; want done until %v", busy, rec, err, later)
	}
}

// TestSweepDecidesOnTheLatestRecord: a record that another transaction changed after the
// sweep chose its candidates (claimed again, or committed again with a later expiry) is
// judged as it is when it would be deleted, and stays. The claim cache forgets what was
// swept, as after Delete.
func TestSweepDecidesOnTheLatestRecord(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	putBacklog(t, s, "moved", 5, 0, 0, 10)
	const extended, reclaimed, cached = "moved:old:000001", "moved:old:000002", "moved:old:000003"
	s.claims.put(cached, claim{body: []byte(`{"stale":true}`)})
	var once sync.Once
	var changed error
	s.hook = func(stage string, _ uint32) {
		if stage != "sweep candidates" {
			return
		}
		once.Do(func() {
			changed = s.Update(ctx, func(tx fence.Tx) error {
				for _, intent := range []string{extended, reclaimed} {
					rec, err := tx.Get(intent)
					if err != nil || rec == nil {
						return errors.Join(err, errors.New("no record"))
					}
					again := *rec
					if intent == extended {
						again.ExpiresAt = tx.Now().Add(time.Hour)
					} else {
						again.State, again.ExpiresAt, again.Cert = fence.StateInFlight, time.Time{}, nil
					}
					if err := tx.Put(&again); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	e := fence.New(s, fence.Config{})
	n, err := e.Sweep(ctx)
	if changed != nil {
		t.Fatal(changed)
	}
	if err != nil || n != 3 {
		t.Fatalf("sweep = %d, %v; want 3 (two of the five changed meanwhile)", n, err)
	}
	for intent, want := range map[string]fence.State{extended: fence.StateDone, reclaimed: fence.StateInFlight, cached: fence.StateNone} {
		if rec, err := e.Status(ctx, intent); err != nil || rec.State != want {
			t.Errorf("%s after the sweep: %s, %v; want %s", intent, rec.State, err, want)
		}
	}
	if _, ok := s.claims.get(cached); ok {
		t.Errorf("the claim cache still holds %s, swept", cached)
	}
}

// TestSweepStatementsUseIndexes: the sweep's candidates come from the expiry index in its
// order (no sort of every expired record), and its deletion finds each candidate by the
// primary key (no scan of the table), in the generic plans PostgreSQL caches for them.
func TestSweepStatementsUseIndexes(t *testing.T) {
	ctx := context.Background()
	schema := testSchema(t)
	openSchema(t, schema).Close()
	conn := admin(t, schema)
	if _, err := conn.Exec(ctx, `INSERT INTO effectfence_records (intent, state, expires_at, body)
	SELECT 'r:' || i, 'done', now() - i * interval '1 second', '\x7b7d' FROM generate_series(1, 20000) i;
	ANALYZE effectfence_records; SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, sql, args, want string
	}{
		{"candidates", sweepCandidates, "now(), 1000", "Index Scan using effectfence_records_expiry"},
		{"deletion", sweepDelete, "ARRAY['r:1', 'r:2'], ARRAY[1, 2]::bigint[], now()", "Index Scan using effectfence_records_pkey"},
	} {
		if _, err := conn.Exec(ctx, "PREPARE "+c.name+" AS "+c.sql); err != nil {
			t.Fatal(err)
		}
		// EXPLAIN without ANALYZE: the deletion is planned, not run.
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+c.name+"("+c.args+")")
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		p := strings.Join(lines, "\n")
		if !strings.Contains(p, c.want) || strings.Contains(p, "Sort") || strings.Contains(p, "Seq Scan") {
			t.Errorf("the sweep's %s: want %s, no sort, no sequential scan:\n%s", c.name, c.want, p)
		}
	}
}
