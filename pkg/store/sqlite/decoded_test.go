package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A record changed behind the cache's back (here by another store on the same file, as
// another process would) is decoded again: the cache answers only for the very bytes it
// decoded.
func TestDecodedCacheFollowsTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	a, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, path, Options{SkipQuickCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
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
	put(a, "first")
	r1, r2 := get(a), get(a)
	if r1.Reason != "first" || r1 != r2 {
		t.Fatalf("a repeated read of unchanged bytes should share one decoded record: %p %p %q", r1, r2, r1.Reason)
	}
	put(b, "second")
	if r := get(a); r.Reason != "second" {
		t.Fatalf("after another store rewrote the record, Get answered %q from its cache", r.Reason)
	}
}

// The commit of a fresh call reads back the claim this store has just written: it is answered
// from the record the claim was encoded from, without decoding its bytes.
func TestCommitDoesNotDecodeItsOwnClaim(t *testing.T) {
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
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "pay:1", Tool: "charge", Args: []byte(`{"amount": 5, "memo":"a b"}`), Agent: "a",
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
}
