package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteLockHeldTooLongSaysWho: another process holds the ledger's write lock past the
// busy timeout (the sqlite3 shell inside BEGIN IMMEDIATE, a process stopped in its
// transaction). The open fails, and its error says what kept it waiting and that nothing was
// changed. Before, it said only "database is locked (5) (SQLITE_BUSY)" after a silent wait of
// the whole busy timeout (30 s for every `effectfence ledger` command).
func TestWriteLockHeldTooLongSaysWho(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")

	s, err = Open(ctx, path, Options{BusyTimeout: 200 * time.Millisecond})
	if err == nil {
		s.Close()
		t.Fatal("the open took the write lock another connection holds")
	}
	for _, want := range []string{path, "another process", "locked longer than the busy timeout (200ms)", "nothing was changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the open's error %q does not say %q", err, want)
		}
	}
}
