package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerExportKeepsHugeRecords: a record of 2 MiB of arguments (written with escapes,
// HTML characters and separators that encoders like to change) and a 2 MiB result is exported
// by the real binary byte for byte, its cert verifying, and `show --json` carries the same, on
// a SQLite file and on PostgreSQL. TestLedgerExportKeepsBytesAndCerts has the small cases.
func TestLedgerExportKeepsHugeRecords(t *testing.T) {
	t.Parallel()
	unit := `\u001b<&` + "\u2028é\u202e" + `\"\\`
	args := `{"blob":"` + strings.Repeat(unit, 2<<20/len(unit)) + `","n":1.0}`
	result := `{"content":[{"type":"text","text":"` + strings.Repeat(`ok \u0000 `+"\u0085", 2<<20/12) + `"}]}`
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				loc = pgLedger(t)
			}
			ctx := context.Background()
			l, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			adm, err := l.Prepare(ctx, fence.Request{Intent: "huge", Tool: "t", Args: json.RawMessage(args), ExactArgs: []byte(args), Agent: "a"})
			if err != nil {
				t.Fatal(err)
			}
			cert, err := l.Commit(ctx, *adm.Ticket, []byte(result))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			check := func(what string, r *fence.Record) {
				t.Helper()
				switch {
				case r == nil || r.Cert == nil:
					t.Fatalf("%s: no record with a cert", what)
				case string(r.ExactArgs) != args:
					t.Errorf("%s: the exact args differ (%d bytes, want %d)", what, len(r.ExactArgs), len(args))
				case string(r.Cert.Result) != result:
					t.Errorf("%s: the result differs (%d bytes, want %d)", what, len(r.Cert.Result), len(result))
				case r.Cert.Hash != cert.Hash:
					t.Errorf("%s: cert %s, committed %s", what, r.Cert.Hash, cert.Hash)
				}
				if err := r.Cert.Verify(); err != nil {
					t.Errorf("%s: the cert does not verify: %v", what, err)
				}
			}
			env := []string{"NO_COLOR=1"}
			r := runBinary(t, env, "", "ledger", "export", "--ledger", loc)
			if r.code != exitOK {
				t.Fatalf("export: exit %d %s", r.code, r.stderr)
			}
			first, _, _ := strings.Cut(r.stdout, "\n")
			var line ledger.ExportLine
			if err := json.Unmarshal([]byte(first), &line); err != nil {
				t.Fatalf("export's first line (%d bytes): %v", len(first), err)
			}
			check("export", line.Record)
			r = runBinary(t, env, "", "ledger", "show", "huge", "--json", "--ledger", loc)
			var d ledger.Detail
			if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &d) != nil {
				t.Fatalf("show --json: exit %d %s", r.code, r.stderr)
			}
			check("show --json", &d.Record)
			if r := runBinary(t, env, "", "ledger", "verify", "--ledger", loc); r.code != exitOK {
				t.Fatalf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}
