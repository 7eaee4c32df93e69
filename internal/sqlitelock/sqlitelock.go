// Package sqlitelock is for tests: it holds a SQLite ledger's write lock as another SQLite
// client would (a sqlite3 shell inside BEGIN IMMEDIATE), without the writers' queue an
// effectfence store takes a turn in.
package sqlitelock

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	_ "modernc.org/sqlite" // the driver
)

// Hold takes the write lock of the SQLite file at path and returns what gives it back
// (called at the test's end too; calling it twice is harmless).
func Hold(t testing.TB, path string) (unlock func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			_ = conn.Close()
			_ = db.Close()
		})
	}
	t.Cleanup(unlock)
	return unlock
}
