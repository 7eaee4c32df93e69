package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

func releaseEvents(t *testing.T, st fence.Store, intent string) []fence.Event {
	t.Helper()
	var evs []fence.Event
	if err := st.View(context.Background(), func(tx fence.Tx) error {
		return tx.Events(intent, func(ev fence.Event) bool {
			if ev.Kind == fence.EventRelease {
				evs = append(evs, ev)
			}
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestEventTokensWithoutANewVersion: the events table's token column (sqlite.eventTokens) is
// added by an open for writing to a ledger of schema 2 that lacks it (a previous build's),
// without a new schema version; its older events read token 0, a release recorded since
// keeps its claim's token, and a read-only open of a ledger that still lacks the column reads
// its events (tokens 0) rather than failing.
func TestEventTokensWithoutANewVersion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, path, sqlite.Options{})
	e := fence.New(st, fence.Config{})
	r := fence.Request{Intent: "tok:old", Tool: "t", Args: json.RawMessage(`{}`)}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if err := e.Release(ctx, *adm.Ticket, "before"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// The file as the previous build left it: schema 2, no token column.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ALTER TABLE events DROP COLUMN token"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	ro := openT(t, path, sqlite.Options{ReadOnly: true})
	if evs := releaseEvents(t, ro, "tok:old"); len(evs) != 1 || evs[0].Token != 0 || evs[0].Reason != "before" {
		t.Fatalf("read-only, no token column: release events %+v; want one, token 0", evs)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	st = openT(t, path, sqlite.Options{})
	if rep := checkT(t, path); !rep.OK || rep.SchemaVersion != sqlite.SchemaVersion {
		t.Fatalf("after the column was added: %+v; want schema %d, OK", rep, sqlite.SchemaVersion)
	}
	e = fence.New(st, fence.Config{})
	r.Intent = "tok:new"
	if adm, err = e.Prepare(ctx, r); err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if err := e.Release(ctx, *adm.Ticket, "after"); err != nil {
		t.Fatal(err)
	}
	if evs := releaseEvents(t, st, "tok:old"); len(evs) != 1 || evs[0].Token != 0 {
		t.Fatalf("an event from before the column: %+v; want token 0", evs)
	}
	if evs := releaseEvents(t, st, "tok:new"); len(evs) != 1 || evs[0].Token != adm.Ticket.Token || evs[0].Token == 0 {
		t.Fatalf("a release recorded since: %+v; want its claim's token %d", evs, adm.Ticket.Token)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ro = openT(t, path, sqlite.Options{ReadOnly: true})
	if evs := releaseEvents(t, ro, "tok:new"); len(evs) != 1 || evs[0].Token != adm.Ticket.Token {
		t.Fatalf("read-only, with the column: %+v; want token %d", evs, adm.Ticket.Token)
	}
}
