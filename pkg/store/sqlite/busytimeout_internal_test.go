package sqlite

import (
	"context"
	"database/sql/driver"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestBusyTimeoutAsDocumented opens a real ledger file as store.Open does (Options{}) and asks
// SQLite, on the writer's connection and on a reader's, how long a statement waits for
// another process's lock: docs/DECISIONS-sqlite.md's busy timeout, in force.
func TestBusyTimeoutAsDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../docs/DECISIONS-sqlite.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`busy_timeout` is ([0-9]+) s\\.").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/DECISIONS-sqlite.md no longer states the busy timeout")
	}
	secs, _ := strconv.Atoi(string(m[1]))
	want := int64(time.Duration(secs) * time.Second / time.Millisecond)

	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "l.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var reader int64
	if err := s.r.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&reader); err != nil {
		t.Fatal(err)
	}
	var writer int64
	err = s.wconn.Raw(func(dc any) error {
		rows, err := (&rawRunner{ctx: ctx, c: dc.(driver.Conn), stmts: s.wstmts}).query("PRAGMA busy_timeout")
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			return rows.Err()
		}
		return rows.Scan(&writer)
	})
	if err != nil {
		t.Fatal(err)
	}
	if writer != want || reader != want || s.opt.BusyTimeout != time.Duration(want)*time.Millisecond {
		t.Fatalf("busy timeout: writer %d ms, reader %d ms, the store's own waits %v; docs/DECISIONS-sqlite.md says %d s",
			writer, reader, s.opt.BusyTimeout, secs)
	}
}
