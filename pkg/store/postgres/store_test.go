package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

func TestMigrateIdempotentAndConcurrent(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctx, Config{URL: testURL(t), Schema: schema, MaxConns: 2})
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent open: %v", err)
	}
	s := openSchema(t, schema)
	var v int
	if err := s.pool.QueryRow(ctx, "SELECT version FROM effectfence_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != schemaVersion {
		t.Fatalf("schema version %d, want %d", v, schemaVersion)
	}
	var rows int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM effectfence_version").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("version rows = %d (%v), want 1", rows, err)
	}
	if _, err := s.pool.Exec(ctx, "UPDATE effectfence_version SET version = $1", schemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, Config{URL: testURL(t), Schema: schema})
	if err == nil {
		t.Fatal("opening a newer schema succeeded")
	}
	if !strings.Contains(err.Error(), "newer than this build") || !strings.Contains(err.Error(), "upgrade effectfence") {
		t.Errorf("opening a newer schema: %v; want it to say the schema is newer and to upgrade", err)
	}
	t.Logf("newer schema: %v", err)
}

func TestOpenBadURL(t *testing.T) {
	_, err := Open(context.Background(), Config{URL: "postgres://u:secret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"})
	if err == nil {
		t.Fatal("open of an unreachable server succeeded")
	}
	if got := err.Error(); strings.Contains(got, "secret") {
		t.Fatalf("error leaks the password: %s", got)
	}
}

func TestEngineRoundTrip(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	e := fence.New(s, fence.Config{})
	req := fence.Request{Intent: "charge:1", Tool: "charge", Args: json.RawMessage(`{"amount":4900}`), Domain: "order:1", Agent: "a"}
	adm, err := e.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	if _, err := e.Prepare(ctx, req); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("second prepare: %v, want in flight", err)
	}
	cert, err := e.Commit(ctx, *adm.Ticket, []byte(`{"id":"ch_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.Verify(); err != nil {
		t.Fatal(err)
	}
	again, err := e.Prepare(ctx, req)
	if err != nil || again.Fresh() || again.Cert.Hash != cert.Hash {
		t.Fatalf("replay: %+v %v", again, err)
	}
	other := req
	other.Args = json.RawMessage(`{"amount":1}`)
	if _, err := e.Prepare(ctx, other); !errors.Is(err, fence.ErrConflict) {
		t.Fatalf("conflict: %v", err)
	}
	seq, err := e.Current(ctx, "order:1")
	if err != nil || seq != 1 {
		t.Fatalf("current = %d %v", seq, err)
	}
	// Stale read set, then a fresh one.
	r2 := fence.Request{Intent: "charge:2", Tool: "charge", Domain: "order:1", ReadSet: []fence.ReadSetEntry{{Domain: "order:1", Seq: 0}}}
	var stale fence.StaleReadSetError
	if _, err := e.Prepare(ctx, r2); !errors.As(err, &stale) || stale.Actual != 1 {
		t.Fatalf("stale: %v", err)
	}
	r2.ReadSet[0].Seq = 1
	adm2, err := e.Prepare(ctx, r2)
	if err != nil || adm2.Ticket.Seq != 2 {
		t.Fatalf("fresh read set: %+v %v", adm2, err)
	}
	if adm2.Ticket.Token <= adm.Ticket.Token {
		t.Fatalf("token %d not above %d", adm2.Ticket.Token, adm.Ticket.Token)
	}
	if err := e.Release(ctx, *adm2.Ticket, "did not run"); err != nil {
		t.Fatal(err)
	}
	// Evict keeps a floor: the domain never hands out 2 again.
	if err := e.EvictDomain(ctx, "order:1"); err != nil {
		t.Fatal(err)
	}
	if seq, _ := e.Current(ctx, "order:1"); seq != 2 {
		t.Fatalf("after evict current = %d, want floor 2", seq)
	}
	if seq, _ := e.Current(ctx, "never-used"); seq != 2 {
		t.Fatalf("unused domain = %d, want floor 2", seq)
	}
	adm3, err := e.Prepare(ctx, fence.Request{Intent: "charge:3", Tool: "charge", Domain: "order:1"})
	if err != nil || adm3.Ticket.Seq != 3 {
		t.Fatalf("after evict: %+v %v", adm3, err)
	}
	if err := e.Abort(ctx, *adm3.Ticket, "timeout"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Prepare(ctx, fence.Request{Intent: "charge:3", Tool: "charge", Domain: "order:1"}); !errors.Is(err, fence.ErrPriorFailure) {
		t.Fatalf("after abort: %v", err)
	}
	if _, err := e.Clear(ctx, "charge:3", "op", "checked the PSP: no charge"); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	err = s.View(ctx, func(tx fence.Tx) error {
		return tx.Events("charge:3", func(ev fence.Event) bool { kinds = append(kinds, ev.Kind); return true })
	})
	if err != nil || fmt.Sprint(kinds) != "[abort clear]" {
		t.Fatalf("events %v %v", kinds, err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ledger != st.SinceBoot || st.Ledger.Admitted != 3 || st.Ledger.Replayed != 1 || st.Ledger.Conflict != 1 || st.Ledger.InFlight != 1 || st.Ledger.Stale != 1 || st.Ledger.PriorFailure != 1 {
		t.Fatalf("stats %+v", st)
	}
	var found *fence.Record
	err = s.View(ctx, func(tx fence.Tx) error {
		var err error
		found, err = tx.CertByHash(cert.Hash)
		return err
	})
	if err != nil || found == nil || found.Intent != "charge:1" {
		t.Fatalf("cert by hash: %+v %v", found, err)
	}
}

// TestSharedDomainNumbers races callers for numbers of one domain from several stores: every
// admission gets a distinct number and none is skipped except by the callers' own releases.
func TestSharedDomainNumbers(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	const stores, workers, each = 3, 8, 10
	var seen sync.Map
	var dup atomic.Int64
	var wg sync.WaitGroup
	for i := range stores {
		e := fence.New(openSized(t, schema, 4), fence.Config{})
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range each {
					adm, err := e.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("n:%d:%d:%d", i, w, k), Tool: "t", Domain: "hot"})
					if err != nil {
						t.Error(err)
						return
					}
					if _, loaded := seen.LoadOrStore(adm.Ticket.Seq, true); loaded {
						dup.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if dup.Load() != 0 {
		t.Fatalf("%d sequence numbers handed out twice", dup.Load())
	}
	e := fence.New(openSchema(t, schema), fence.Config{})
	cur, err := e.Current(ctx, "hot")
	if err != nil || cur != stores*workers*each {
		t.Fatalf("current %d %v, want %d", cur, err, stores*workers*each)
	}
}

// TestDomainRace: callers that all read the same seq and name the target domain in their read
// set: exactly one wins, the others get domain_race (not stale, not a second number).
func TestDomainRace(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	var wins, races atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		e := fence.New(openSized(t, schema, 2), fence.Config{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("scale:%d", i), Tool: "scale", Domain: "deploy", ReadSet: []fence.ReadSetEntry{{Domain: "deploy", Seq: 0}}})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, fence.ErrDomainRace), errors.Is(err, fence.ErrStaleReadSet):
				races.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || races.Load() != 11 {
		t.Fatalf("wins %d, refused %d", wins.Load(), races.Load())
	}
}

func TestCorruptRecord(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, "INSERT INTO effectfence_records (intent, state, body) VALUES ('bad', 'done', '\\x7b7b'::bytea)"); err != nil {
		t.Fatal(err)
	}
	e := fence.New(s, fence.Config{})
	_, err := e.Prepare(ctx, fence.Request{Intent: "bad", Tool: "t"})
	if err == nil || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), "was not run") || !strings.Contains(err.Error(), "DELETE FROM") {
		t.Fatalf("corrupt record: %v", err)
	}
	if fence.CodeOf(err) != fence.CodeStore {
		t.Fatalf("code %q", fence.CodeOf(err))
	}
	// The way out the message gives works.
	_, sql, _ := strings.Cut(err.Error(), "remove the row: ")
	if _, err := s.pool.Exec(ctx, sql); err != nil {
		t.Fatalf("running %q: %v", sql, err)
	}
	if adm, err := e.Prepare(ctx, fence.Request{Intent: "bad", Tool: "t"}); err != nil || !adm.Fresh() {
		t.Fatalf("after removing the row: %+v %v", adm, err)
	}
}

// TestCounterShardsFold: shards of processes long gone are folded into one row when a store
// opens, and the ledger's totals do not change.
func TestCounterShardsFold(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	for i := range 3 {
		e := fence.New(openSized(t, schema, 2), fence.Config{})
		if _, err := e.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("fold:%d", i), Tool: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s := openSchema(t, schema)
	if _, err := s.pool.Exec(ctx, "UPDATE effectfence_counters SET updated_at = now() - interval '2 hours'"); err != nil {
		t.Fatal(err)
	}
	var shards int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM effectfence_counters").Scan(&shards); err != nil || shards != 3 {
		t.Fatalf("shards before: %d %v", shards, err)
	}
	s2 := openSchema(t, schema)
	if err := s2.pool.QueryRow(ctx, "SELECT count(*) FROM effectfence_counters").Scan(&shards); err != nil || shards != 1 {
		t.Fatalf("shards after: %d %v", shards, err)
	}
	st, err := fence.New(s2, fence.Config{}).Stats(ctx)
	if err != nil || st.Ledger.Admitted != 3 || st.Ledger.Total() != 3 {
		t.Fatalf("ledger after folding: %+v %v", st.Ledger, err)
	}
}

// TestScanGoesOnPastUnreadableRecords: rows whose body does not decode (edited by hand,
// damaged) are told to a Scan that asks for them, by intent, and every other record is still
// scanned, in order, in a read and in a write transaction; a Scan that does not ask ends at
// the first with its error.
func TestScanGoesOnPastUnreadableRecords(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	name := func(i int) string { return fmt.Sprintf("r:%03d", i) }
	err := s.Update(ctx, func(tx fence.Tx) error {
		for i := range 40 {
			if err := tx.Put(&fence.Record{Intent: name(i), State: fence.StateFailed, Tool: "t", Token: uint64(i + 1)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	damaged := []int{0, 17, 39}
	for k, i := range damaged {
		body := `{"intent":"` + name(i) + `","state":`
		if k == 1 {
			body = `{"intent":"someone-else","state":"failed"}`
		}
		if _, err := s.pool.Exec(ctx, "UPDATE effectfence_records SET body = convert_to($1, 'UTF8') WHERE intent = $2", body, name(i)); err != nil {
			t.Fatal(err)
		}
	}
	var want, wantBad []string
	for i := range 40 {
		if slices.Contains(damaged, i) {
			wantBad = append(wantBad, name(i))
		} else {
			want = append(want, name(i))
		}
	}
	for _, txn := range []struct {
		name string
		run  func(context.Context, func(fence.Tx) error) error
	}{{"View", s.View}, {"Update", s.Update}} {
		var got, bad []string
		err := txn.run(ctx, func(tx fence.Tx) error {
			got, bad = nil, nil
			f := fence.Filter{States: []fence.State{fence.StateFailed}, Unreadable: func(u *fence.UnreadableError) {
				if !strings.Contains(u.Error(), "DELETE FROM") {
					t.Errorf("%s: unreadable %s without its way out: %v", txn.name, u.Intent, u)
				}
				bad = append(bad, u.Intent)
			}}
			return tx.Scan(f, func(r *fence.Record) bool { got = append(got, r.Intent); return true })
		})
		if err != nil {
			t.Fatalf("%s: Scan told of unreadable records failed: %v", txn.name, err)
		}
		if !slices.Equal(got, want) || !slices.Equal(bad, wantBad) {
			t.Fatalf("%s: Scan gave %q and unreadable %q; want %q and %q", txn.name, got, bad, want, wantBad)
		}
	}
	err = s.View(ctx, func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(*fence.Record) bool { return true })
	})
	var u *fence.UnreadableError
	if !errors.As(err, &u) || u.Intent != name(0) {
		t.Fatalf("a Scan not told of unreadable records = %v; want the unreadable %s", err, name(0))
	}
}
