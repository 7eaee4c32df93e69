package fence

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSupersedeRefusesWhenEveryNameIsHeld: when every name a superseded record may move to
// holds another record, the new attempt is refused with an error that says so, and nothing
// moves: the intent keeps its done record and every name keeps its own.
func TestSupersedeRefusesWhenEveryNameIsHeld(t *testing.T) {
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
	if IsSupersededName(supersededName(base, maxSupersededNames+1), r.Intent, cert.Hash) || IsSupersededName(base+"~1", r.Intent, cert.Hash) {
		t.Fatal("IsSupersededName accepts a name supersede never uses")
	}
	time.Sleep(20 * time.Millisecond)
	r.ReplayWindow = time.Millisecond
	if adm, err := e.Prepare(ctx, r); err == nil || !strings.Contains(err.Error(), "cannot be moved aside") {
		t.Fatalf("prepare = %+v, %v; want a refusal naming the held names", adm, err)
	}
	if rec, err := e.Status(ctx, r.Intent); err != nil || rec.State != StateDone || rec.Cert.Hash != cert.Hash {
		t.Fatalf("%s = %+v, %v; want its done record, unmoved", r.Intent, rec, err)
	}
	for i := 1; i <= maxSupersededNames; i++ {
		if rec, err := e.Status(ctx, supersededName(base, i)); err != nil || rec.Tool != "other" {
			t.Fatalf("name %d = %+v, %v; want its own record", i, rec, err)
		}
	}
}
