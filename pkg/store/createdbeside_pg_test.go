package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerCreatedBesideOthersIsToldOf: a PostgreSQL ledger's schema is renamed (ALTER
// SCHEMA … RENAME) and a fence restarts with the old name in its URL. Open creates the ledger
// it is named, by design, so it made an empty one there, and every call the renamed ledger
// recorded ran again, without a word. Open now says on the log, naming the others, that it
// created a new, empty ledger while the database holds ledgers in other schemas; opening an
// existing ledger says nothing of it.
func TestLedgerCreatedBesideOthersIsToldOf(t *testing.T) {
	raw := pgtest.URL(t)
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	// Named to sort first among the test server's ledgers: the warning names five.
	schema := fmt.Sprintf("aaa_effectfence_beside_%d_%s", os.Getpid(), hex.EncodeToString(b[:]))
	renamed := schema + "_renamed"
	t.Cleanup(func() { pgtest.Drop(t, raw, schema); pgtest.Drop(t, raw, renamed) })
	ledgerURL := func(s string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("search_path", s)
		u.RawQuery = q.Encode()
		return pgtest.FewConns(u.String())
	}
	open := func(s string) (*store.Ledger, string) {
		t.Helper()
		var log bytes.Buffer
		l, err := store.Open(ctx, store.Options{Ledger: ledgerURL(s), Log: &log})
		if err != nil {
			t.Fatal(err)
		}
		return l, log.String()
	}
	req := fence.Request{Intent: "charge:beside", Tool: "charge", Args: []byte(`{"usd":1}`)}
	l, _ := open(schema)
	adm, err := l.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	if _, err := l.Commit(ctx, *adm.Ticket, []byte(`"charged"`)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER SCHEMA "+pgx.Identifier{schema}.Sanitize()+" RENAME TO "+pgx.Identifier{renamed}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	// The restart with the old name: a new, empty ledger, told of.
	l, log := open(schema)
	dup, err := l.Prepare(ctx, req)
	l.Close()
	if err != nil || !dup.Fresh() {
		t.Fatalf("the duplicate in the new ledger: %+v %v (the case needs the empty ledger it makes)", dup, err)
	}
	for _, want := range []string{
		"effectfence: warning: ledger ",
		fmt.Sprintf("created a new, empty ledger in schema %q (this open, or an earlier one: no claim has used it yet), while this database holds effectfence ledgers in schemas %q", schema, renamed),
		"every call recorded there will run again here",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log of the open that created a ledger beside the renamed one:\n%s\nwant %q in it", log, want)
		}
	}
	if strings.Count(log, "\n") != 1 {
		t.Errorf("the warning is not one line:\n%s", log)
	}

	// The renamed ledger, named: found there, nothing said.
	l, log = open(renamed)
	again, err := l.Prepare(ctx, req)
	l.Close()
	if err != nil || again.Fresh() || again.Cert == nil {
		t.Fatalf("the duplicate in the renamed ledger: %+v %v; want the replay", again, err)
	}
	if strings.Contains(log, "created a new") {
		t.Errorf("opening the existing ledger warned:\n%s", log)
	}
}
