package sqlite

import (
	"context"
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
