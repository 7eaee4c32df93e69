package fence

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSupersedeMovesPastEveryHeldName: when every numbered name a superseded record may move
// to holds another record, the record moves to a spare name of its own (base, "~", a nonce),
// and every name keeps its own record. Before 2026-12-06 the new attempt was refused ("cannot
// be moved aside") until one of those records expired.
func TestSupersedeMovesPastEveryHeldName(t *testing.T) {
	ctx := context.Background()
	e := New(NewMemoryStore(), Config{})
	r := Request{Intent: "order:1", Tool: "charge", Args: json.RawMessage(`{"usd":1}`)}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	cert, err := e.Commit(ctx, *adm.Ticket, json.RawMessage(`"charged"`))
	if err != nil {
		t.Fatal(err)
	}
	base := SupersededIntent(r.Intent, cert.Hash)
	for i := 1; i <= maxSupersededNames; i++ {
		o := Request{Intent: supersededName(base, i), Tool: "other", Args: json.RawMessage(`{}`)}
		a, err := e.Prepare(ctx, o)
		if err != nil || !a.Fresh() {
			t.Fatal(a, err)
		}
		if _, err := e.Commit(ctx, *a.Ticket, json.RawMessage(`"other"`)); err != nil {
			t.Fatal(err)
		}
		if !IsSupersededName(o.Intent, r.Intent, cert.Hash) {
			t.Fatalf("IsSupersededName(%q) = false", o.Intent)
		}
	}
	if IsSupersededName(supersededName(base, maxSupersededNames+1), r.Intent, cert.Hash) || IsSupersededName(base+"~1", r.Intent, cert.Hash) ||
		IsSupersededName(base+"~"+strings.Repeat("g", 32), r.Intent, cert.Hash) || IsSupersededName(base+"~"+strings.Repeat("A", 32), r.Intent, cert.Hash) ||
		IsSupersededName(base+"~"+strings.Repeat("a", 31), r.Intent, cert.Hash) {
		t.Fatal("IsSupersededName accepts a name supersede never uses")
	}
	time.Sleep(20 * time.Millisecond)
	r.ReplayWindow = time.Millisecond
	if adm, err := e.Prepare(ctx, r); err != nil || !adm.Fresh() {
		t.Fatalf("prepare = %+v, %v; want it admitted, the done record moved to a spare name", adm, err)
	}
	var moved string
	err = e.Store().View(ctx, func(tx Tx) error {
		return tx.Events(r.Intent, func(ev Event) bool {
			if ev.Kind == EventSuperseded {
				_, moved, _ = strings.Cut(ev.Reason, "the done record is kept as ")
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if rest, ok := strings.CutPrefix(moved, base+"~"); !ok || !isNonce(rest) || !IsSupersededName(moved, r.Intent, cert.Hash) {
		t.Fatalf("moved to %q; want %s~ and a nonce", moved, base)
	}
	if rec, err := e.Status(ctx, moved); err != nil || rec.State != StateDone || rec.Cert == nil || rec.Cert.Hash != cert.Hash {
		t.Fatalf("%s = %+v, %v; want the superseded done record", moved, rec, err)
	}
	for i := 1; i <= maxSupersededNames; i++ {
		if rec, err := e.Status(ctx, supersededName(base, i)); err != nil || rec.Tool != "other" {
			t.Fatalf("name %d = %+v, %v; want its own record", i, rec, err)
		}
	}
}
