package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
)

// SetTestHookMigrated sets a function that runs after each migration step, before its
// transaction commits (nil removes it). Only tests use it: the crash tests stop there.
func SetTestHookMigrated(f func(from int)) { testHookMigrated = f }

// SetTestHookDecoded sets a function told of every record body the store decodes (nil
// removes it).
func SetTestHookDecoded(f func(intent string)) { testHookDecoded = f }

// Queued is how many Updates wait in the store's queue for a transaction (a leader's own
// counted while it waits for the write lock, its batch taken out once it holds it): tests
// wait for callers to line up behind a transaction they hold.
func (s *Store) Queued() int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return len(s.queue)
}

// SetTestHookBeforeCommit sets a function that runs on the leader's goroutine before each
// batch's COMMIT, outside the transaction functions (nil removes it).
func SetTestHookBeforeCommit(f func()) { testHookBeforeCommit = f }

// LeaveWriterInTransaction begins a transaction on the writer's connection and leaves it
// open, as a batch whose ROLLBACK failed would (call it with no Update running).
func (s *Store) LeaveWriterInTransaction() error {
	return s.wconn.Raw(func(dc any) error {
		_, err := (&rawRunner{ctx: context.Background(), c: dc.(driver.Conn), stmts: s.wstmts}).exec(qBegin)
		return err
	})
}

// MakeV2 turns a ledger of schema 1 at path into one of schema 2 as the builds of schema 2
// left it (their migration, version, record indexes and events' token column), with no
// record_args table: the file a build of schema 2 hands over to this one.
func MakeV2(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range []string{migrations[1], "UPDATE meta SET value = 2 WHERE key = 'schema_version'", recordIndexes, eventTokens} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// WholeSize is the length of the record encoding a records row's body stands for (split.go).
func WholeSize(body []byte) int { return wholeSize(body) }

// IsSplit reports whether a records row's body is split (split.go).
func IsSplit(body []byte) bool { return isSplit(body) }
