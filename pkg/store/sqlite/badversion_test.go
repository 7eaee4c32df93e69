package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A ledger whose recorded schema version is one no effectfence ledger has (the meta row edited
// by hand or damaged: -1, 0) is refused with an error and left as it is. Before, an open for
// writing (every `effectfence ledger` command but check, every wrap) took it for an old ledger
// and indexed its migrations with it: -1 panicked (index out of range), and 0 would have run
// the first migration over a ledger of the current schema; `ledger check` said it would be
// migrated in place.
func TestSchemaVersionThatNoLedgerHasIsRefused(t *testing.T) {
	for _, v := range []string{"-1", "0"} {
		t.Run(v, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			seedLedger(t, path, 3)
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("UPDATE meta SET value = ? WHERE key = 'schema_version'", v); err != nil {
				t.Fatal(err)
			}
			db.Close()
			before := fileSum(t, path)
			err = func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("open of a ledger of schema version %s panicked: %v", v, p)
					}
				}()
				st, err := sqlite.Open(ctx, path, sqlite.Options{})
				if err == nil {
					st.Close()
				}
				return err
			}()
			if err == nil || !strings.Contains(err.Error(), "schema version "+v) {
				t.Fatalf("open of a ledger of schema version %s = %v; want it refused, naming the version", v, err)
			}
			if fileSum(t, path) != before {
				t.Fatal("the ledger changed")
			}
			r, err := sqlite.Check(ctx, path)
			if err != nil || r.OK || strings.Contains(strings.Join(r.Advice, " "), "migrated in place") {
				t.Fatalf("ledger check of schema version %s: %v %+v", v, err, r)
			}
		})
	}
}
