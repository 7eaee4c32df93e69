package sqlite

import (
	"context"
	"database/sql/driver"
	"path/filepath"
	"testing"
)

// TestWriterIsWALWithSynchronousFull holds the product contract's "a SQLite file (WAL,
// synchronous FULL)": an outcome is on disk before the fence answers only if the connection that
// commits it syncs the log at every commit. Both are per connection (synchronous) or set by the
// writer (journal_mode), so they are read where they count: on the writer's connection of a
// real ledger file, as store.Open opens it, and, for the journal mode, on a reader's too.
func TestWriterIsWALWithSynchronousFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "l.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode string
	var sync int64
	err = s.wconn.Raw(func(dc any) error {
		r := &rawRunner{ctx: ctx, c: dc.(driver.Conn), stmts: s.wstmts}
		for q, v := range map[string]any{"PRAGMA journal_mode": &mode, "PRAGMA synchronous": &sync} {
			rows, err := r.query(q)
			if err != nil {
				return err
			}
			if rows.Next() {
				err = rows.Scan(v)
			} else {
				err = rows.Err()
			}
			rows.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// synchronous: 0 OFF, 1 NORMAL (in WAL mode, a commit is not synced), 2 FULL, 3 EXTRA.
	if mode != "wal" || sync != 2 {
		t.Fatalf("writer's connection: journal_mode %q, synchronous %d; want wal and 2 (FULL)", mode, sync)
	}
	var readerMode string
	if err := s.r.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&readerMode); err != nil {
		t.Fatal(err)
	}
	if readerMode != "wal" {
		t.Fatalf("a reader sees journal_mode %q, want wal", readerMode)
	}
}
