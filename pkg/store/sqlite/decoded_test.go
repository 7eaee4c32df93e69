package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A record changed behind the cache's back (here by another store on the same file, as
// another process would) is decoded again: the cache answers only for the very bytes it
// decoded. Large records (over decodedMaxBody, kept in the cache's big table) behave the same.
func TestDecodedCacheFollowsTheFile(t *testing.T) {
	for _, size := range []int{0, 40 << 10} {
		t.Run(fmt.Sprintf("pad=%d", size), func(t *testing.T) {
			ctx := context.Background()
			a, b := twoStores(t)
			pad := strings.Repeat("x", size)
			put := func(s *Store, reason string) {
				t.Helper()
				err := s.Update(ctx, func(tx fence.Tx) error {
					return tx.Put(&fence.Record{Intent: "i", State: fence.StateFailed, Fingerprint: "fp", Tool: "t", Reason: reason + pad})
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			get := func(s *Store) *fence.Record {
				t.Helper()
				var rec *fence.Record
				if err := s.View(ctx, func(tx fence.Tx) (err error) { rec, err = tx.Get("i"); return err }); err != nil {
					t.Fatal(err)
				}
				return rec
			}
			put(a, "first")
			r1, r2 := get(a), get(a)
			if r1.Reason != "first"+pad || r1 != r2 {
				t.Fatalf("a repeated read of unchanged bytes should share one decoded record: %p %p %.10q", r1, r2, r1.Reason)
			}
			put(b, "second")
			if r := get(a); r.Reason != "second"+pad {
				t.Fatalf("after another store rewrote the record, Get answered %.10q from its cache", r.Reason)
			}
		})
	}
}

// A large record written in a transaction that rolls back leaves its decoded twin in the
// cache (Put stores it before the commit), and the cache must not answer with it: a later
// read finds the bytes that are still in the file.
func TestDecodedCacheAfterRollback(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pad := strings.Repeat("y", 48<<10)
	rec := func(reason string) *fence.Record {
		return &fence.Record{Intent: "i", State: fence.StateInFlight, Fingerprint: "fp", Tool: "t", Args: []byte(`{"memo":"` + pad + `"}`), Reason: reason}
	}
	if err := s.Update(ctx, func(tx fence.Tx) error { return tx.Put(rec("kept")) }); err != nil {
		t.Fatal(err)
	}
	errUndo := errors.New("undo")
	err = s.Update(ctx, func(tx fence.Tx) error {
		if err := tx.Put(rec("undone")); err != nil {
			return err
		}
		got, err := tx.Get("i")
		if err != nil || got.Reason != "undone" {
			t.Errorf("inside the transaction, Get answered %+v, %v; want its own write", got, err)
		}
		return errUndo
	})
	if !errors.Is(err, errUndo) {
		t.Fatalf("Update: %v", err)
	}
	for _, update := range []bool{false, true} {
		var got *fence.Record
		fn := func(tx fence.Tx) (err error) { got, err = tx.Get("i"); return err }
		if update {
			err = s.Update(ctx, fn)
		} else {
			err = s.View(ctx, fn)
		}
		if err != nil || got == nil || got.Reason != "kept" || string(got.Args) != string(rec("").Args) {
			t.Fatalf("after the rollback (update=%v), Get answered %.40q, %v; want the record that was kept", update, got.Reason, err)
		}
	}
}

// The big table never holds more than decodedBigBudget, whatever is put in it: old entries go,
// the newest stays, and its bookkeeping matches what its slots hold.
func TestDecodedCacheBigBudget(t *testing.T) {
	c := newDecodedCache()
	rec := &fence.Record{}
	sizes := []int{decodedMaxBody + 1, 64 << 10, 300 << 10, decodedBigMax}
	for i := range 400 {
		intent := fmt.Sprintf("intent:%d", i)
		body := bytes.Repeat([]byte{byte(i)}, sizes[i%len(sizes)])
		h := c.hash(intent)
		c.put(h, intent, body, rec)
		if c.get(h, intent, body) != rec {
			t.Fatalf("put %d (%d bytes): the newest entry is not cached", i, len(body))
		}
		sum := 0
		c.big.Each(func(e *decodedEntry) { sum += e.cost() })
		if sum != c.big.Bytes() || sum > decodedBigBudget {
			t.Fatalf("put %d: the big table holds %d bytes, counts %d, budget %d", i, sum, c.big.Bytes(), decodedBigBudget)
		}
	}
	huge := make([]byte, decodedBigMax+1)
	c.put(c.hash("huge"), "huge", huge, rec)
	if c.get(c.hash("huge"), "huge", huge) != nil {
		t.Fatal("a body over decodedBigMax was cached")
	}
	small := []byte(`{"intent":"s"}`)
	c.put(c.hash("s"), "s", small, rec)
	if c.get(c.hash("s"), "s", small) != rec {
		t.Fatal("a small body was not cached")
	}
}

// The commit of a fresh call reads back the claim this store has just written: it is answered
// from the record the claim was encoded from, without decoding its bytes, at any size the
// cache keeps (a 64 KB call's claim is over decodedMaxBody).
func TestCommitDoesNotDecodeItsOwnClaim(t *testing.T) {
	for _, size := range []int{0, 4 << 10, 32 << 10} {
		t.Run(fmt.Sprintf("pad=%d", size), func(t *testing.T) {
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			eng := fence.New(s, fence.Config{})
			defer eng.Close()
			var decoded []string
			SetTestHookDecoded(func(intent string) { decoded = append(decoded, intent) })
			defer SetTestHookDecoded(nil)
			args := fmt.Sprintf(`{"amount": 5, "memo":"a b%s"}`, strings.Repeat("z", size))
			adm, err := eng.Prepare(ctx, fence.Request{Intent: "pay:1", Tool: "charge", Args: []byte(args), Agent: "a",
				ReadSet: []fence.ReadSetEntry{}, Domain: "card"})
			if err != nil || !adm.Fresh() {
				t.Fatalf("prepare: %+v %v", adm, err)
			}
			cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`))
			if err != nil {
				t.Fatal(err)
			}
			if len(decoded) != 0 {
				t.Fatalf("the store decoded %q while admitting and committing a fresh call", decoded)
			}
			if err := cert.Verify(); err != nil {
				t.Fatal(err)
			}
			var rec *fence.Record
			if err := s.View(ctx, func(tx fence.Tx) (err error) { rec, err = tx.Get("pay:1"); return err }); err != nil || rec == nil || rec.State != fence.StateDone {
				t.Fatalf("done record %+v, %v", rec, err)
			}
			if rec.Cert.Hash != cert.Hash {
				t.Fatalf("recorded cert %s, answered %s", rec.Cert.Hash, cert.Hash)
			}
		})
	}
}

// A Get of a large record the cache holds asks SQLite to compare the bytes where they are: it
// copies no body out of SQLite, so reading it again allocates far less than its size.
func TestGetOfCachedLargeRecordCopiesNoBody(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := &fence.Record{Intent: "i", State: fence.StateFailed, Fingerprint: "fp", Tool: "t", Reason: strings.Repeat("r", 64<<10)}
	if err := s.Update(ctx, func(tx fence.Tx) error { return tx.Put(rec) }); err != nil {
		t.Fatal(err)
	}
	var got *fence.Record
	get := func() {
		if err := s.View(ctx, func(tx fence.Tx) (err error) { got, err = tx.Get("i"); return err }); err != nil || got == nil || got.Reason != rec.Reason {
			t.Fatalf("Get: %v, %v", got != nil, err)
		}
	}
	get()
	const n = 50
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		get()
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / n; per > 16<<10 {
		t.Fatalf("a Get of an unchanged 64 KB record allocated %d bytes", per)
	}
}

// A large cached record that another process replaced by a small one, or deleted, is read
// from the file, and its entry leaves the cache's big table.
func TestDecodedCacheLargeRecordShrinksOrGoes(t *testing.T) {
	ctx := context.Background()
	a, b := twoStores(t)
	put := func(s *Store, reason string) {
		t.Helper()
		err := s.Update(ctx, func(tx fence.Tx) error {
			return tx.Put(&fence.Record{Intent: "i", State: fence.StateFailed, Fingerprint: "fp", Tool: "t", Reason: reason})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(s *Store) *fence.Record {
		t.Helper()
		var rec *fence.Record
		if err := s.View(ctx, func(tx fence.Tx) (err error) { rec, err = tx.Get("i"); return err }); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	large := strings.Repeat("l", 40<<10)
	put(a, large)
	if r := get(a); r == nil || r.Reason != large {
		t.Fatal("the large record was not read back")
	}
	h := a.decoded.hash("i")
	if a.decoded.bigEntry(h, "i") == nil {
		t.Fatal("the large record is not in the cache's big table")
	}
	put(b, "small")
	if r := get(a); r == nil || r.Reason != "small" {
		t.Fatalf("after another store shrank the record, Get answered %.10q", r.Reason)
	}
	if a.decoded.bigEntry(h, "i") != nil || a.decoded.big.Bytes() != 0 {
		t.Fatalf("the replaced large record stayed in the big table (%d bytes counted)", a.decoded.big.Bytes())
	}
	put(a, large)
	if err := b.Update(ctx, func(tx fence.Tx) error { return tx.Delete("i") }); err != nil {
		t.Fatal(err)
	}
	if r := get(a); r != nil {
		t.Fatalf("after another store deleted the record, Get answered %.10q", r.Reason)
	}
	if a.decoded.bigEntry(h, "i") != nil || a.decoded.big.Bytes() != 0 {
		t.Fatal("the deleted large record stayed in the big table")
	}
}

// A large cached record whose body another process replaced by something that is not a blob
// (a damaged or tampered file) is not answered from the cache: Get reports what decoding the
// file's value gives, as it does for a record it never cached. The integer 1 is the value
// qGetUnchanged once answered for "the bytes are unchanged".
func TestDecodedCacheLargeRecordReplacedByNonBlob(t *testing.T) {
	for _, value := range []string{"1", "1.0", "'1'", "x'31'", "2"} {
		t.Run(value, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "ledger.db")
			s, err := Open(ctx, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rec := &fence.Record{Intent: "i", State: fence.StateFailed, Fingerprint: "fp", Tool: "t", Reason: strings.Repeat("r", 40<<10)}
			if err := s.Update(ctx, func(tx fence.Tx) error { return tx.Put(rec) }); err != nil {
				t.Fatal(err)
			}
			get := func() (*fence.Record, error) {
				var got *fence.Record
				err := s.View(ctx, func(tx fence.Tx) (err error) { got, err = tx.Get("i"); return err })
				return got, err
			}
			if got, err := get(); err != nil || got == nil || got.Reason != rec.Reason {
				t.Fatalf("Get before the change: %v", err)
			}
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// The records table is STRICT: only a file whose schema was edited by hand holds
			// such a body. Edit it so (as a damaged or tampered file may be).
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var ver int
			if err := conn.QueryRowContext(ctx, "PRAGMA schema_version").Scan(&ver); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				"PRAGMA writable_schema = ON",
				"UPDATE sqlite_schema SET sql = replace(sql, ') STRICT', ')') WHERE name = 'records'",
				fmt.Sprintf("PRAGMA schema_version = %d", ver+1),
				"PRAGMA writable_schema = OFF",
			} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			conn.Close()
			db.Close()
			db, err = sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("UPDATE records SET body = " + value + " WHERE intent = 'i'"); err != nil {
				t.Fatal(err)
			}
			if got, err := get(); err == nil {
				t.Fatalf("the file holds %s as the record's body, and Get answered %v (reason %.10q), no error", value, got != nil, got.Reason)
			}
		})
	}
}

// twoStores opens two stores on one new ledger file, as two processes would; the test closes
// them.
func twoStores(t *testing.T) (a, b *Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	a, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err = Open(context.Background(), path, Options{SkipQuickCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}
