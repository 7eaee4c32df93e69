//go:build !linux

package sqlite

import "context"

// syncLog does nothing here: it answers for Linux's page cache, which keeps clean copies of
// writes that failed (see durablelog_linux.go).
func (s *Store) syncLog(context.Context) error { return nil }
