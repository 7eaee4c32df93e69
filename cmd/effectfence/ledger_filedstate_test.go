package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestRecoverLeavesADoneRecordFiledAsInFlight: a done record whose state column (the index
// Recover finds claims by) says in_flight, by damage or a hand edit of a SQLite file or a
// PostgreSQL row, its body intact, is a done outcome, not a claim. Before, the recovery of
// any open, `ledger verify`'s included, judged it as an abandoned claim of a dead holder: a
// re-run-safe one was deleted (its duplicate then ran again) and any other was made unknown
// with its cert, an orphan event saying "state before: done".
func TestRecoverLeavesADoneRecordFiledAsInFlight(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_STATE_HOME", dir) // the PostgreSQL spool
			rows := newLedgerRows(t, kind, dir)
			loc, exec := rows.loc, rows.exec
			states := func() map[string]string {
				got := map[string]string{}
				rows.query("SELECT intent, state, body FROM $TABLE", func(r rowScanner) error { return filedRows(got, r) })
				return got
			}
			ctx := context.Background()
			// A lease of 10 ms has lapsed by the time verify opens the ledger: its recovery judges
			// every record it takes for a claim.
			l, err := store.Open(ctx, store.Options{Ledger: loc, LeaseTTL: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			for _, intent := range []string{"refund:1", "refund:2"} {
				adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "refund", Args: []byte(`{"amount":4900}`), RerunSafe: intent == "refund:2"})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Commit(ctx, *adm.Ticket, []byte(`{"content":[{"type":"text","text":"refunded"}]}`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			exec("UPDATE $TABLE SET state = 'in_flight' WHERE intent <> $1", "")

			env := []string{"NO_COLOR=1", store.EnvLedger + "="}
			r := runBinary(t, env, "", "ledger", "verify", "--ledger", loc)
			want := map[string]string{"refund:1": "in_flight/done", "refund:2": "in_flight/done"}
			if got := states(); len(got) != 2 || got["refund:1"] != want["refund:1"] || got["refund:2"] != want["refund:2"] {
				t.Errorf("after ledger verify the records are (column/body) %q; want %q, as they were\n%s%s", got, want, r.stdout, r.stderr)
			}
			// Both certs verify; both records are named as filed under another state than they
			// hold (TestVerifyComparesTheCertHashARecordIsFiledUnder), as ledger check names them.
			if r.code != exitError || !strings.Contains(r.stdout, "2 verified") || strings.Count(r.stdout, `done but filed as "in_flight"`) != 2 {
				t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// filedAs notes in got the state a record is filed under and the one its body says, as
// "column/body".
func filedAs(got map[string]string, intent, state string, body []byte) error {
	var rec fence.Record
	if err := fence.DecodeRecord(body, &rec); err != nil {
		return err
	}
	got[intent] = state + "/" + string(rec.State)
	return nil
}

// filedRows reads rows of (intent, state, body), from either database, into got (filedAs).
func filedRows(got map[string]string, rows rowScanner) error {
	for rows.Next() {
		var intent, state string
		var body []byte
		if err := rows.Scan(&intent, &state, &body); err != nil {
			return err
		}
		if err := filedAs(got, intent, state, body); err != nil {
			return err
		}
	}
	return rows.Err()
}
