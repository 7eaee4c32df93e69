//go:build unix

package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
)

// TestReadOnlyServerIsRefusedAtOpen: a ledger URL that reaches a server which cannot take
// writes, a hot standby (not promoted) or a session that is read-only by default
// (default_transaction_read_only on for the database), is refused when the store opens, with
// an error that says which and what to do, before anything is tried (and with Existing, the
// ledger commands', too). Before, the error was PostgreSQL's own about the first statement
// that wrote ("cannot execute CREATE TABLE in a read-only transaction"), naming neither the
// standby nor the setting.
func TestReadOnlyServerIsRefusedAtOpen(t *testing.T) {
	t.Parallel()
	c := pgcluster.New(t)
	ctx := context.Background()
	url := func(cl *pgcluster.Cluster) string { return cl.URL("postgres", "search_path=ledger") }
	s, err := Open(ctx, Config{URL: url(c), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	standby := c.Standby()
	for _, existing := range []bool{false, true} {
		_, err := Open(ctx, Config{URL: url(standby), MaxConns: 2, Existing: existing})
		if !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), "standby") || !strings.Contains(err.Error(), "target_session_attrs=read-write") {
			t.Errorf("Open on a hot standby (existing %v): %v", existing, err)
		}
	}
	c.Exec("postgres", "ALTER DATABASE postgres SET default_transaction_read_only = on")
	for _, existing := range []bool{false, true} {
		_, err := Open(ctx, Config{URL: url(c), MaxConns: 2, Existing: existing})
		if !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), "default_transaction_read_only") {
			t.Errorf("Open on a read-only session (existing %v): %v", existing, err)
		}
	}
	// The refusal is the server's state, not a flag of the store's: a primary that takes
	// writes again is opened.
	c.Exec("postgres", "BEGIN READ WRITE; ALTER DATABASE postgres SET default_transaction_read_only = off; COMMIT")
	s, err = Open(ctx, Config{URL: url(c), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
