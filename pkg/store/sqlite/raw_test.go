package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

type kind string

// namedValues converts what database/sql would: int to int64, a named string type to string.
func TestNamedValues(t *testing.T) {
	nv, err := namedValues([]any{7, int64(8), kind("k"), nil, []byte("b"), "s"})
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.Value{int64(7), int64(8), "k", nil, []byte("b"), "s"}
	for i, v := range nv {
		if v.Ordinal != i+1 {
			t.Errorf("argument %d has ordinal %d", i, v.Ordinal)
		}
		if b, ok := want[i].([]byte); ok {
			if string(v.Value.([]byte)) != string(b) {
				t.Errorf("argument %d = %v, want %v", i, v.Value, want[i])
			}
		} else if v.Value != want[i] {
			t.Errorf("argument %d = %#v, want %#v", i, v.Value, want[i])
		}
	}
	if _, err := namedValues([]any{struct{}{}}); err == nil {
		t.Error("a struct argument was accepted")
	}
}

// The writer's runner scans like database/sql for the destinations the ledger uses, and
// refuses the rest instead of guessing.
func TestRawRunnerScan(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		r := &rawRunner{ctx: ctx, c: dc.(driver.Conn)}
		if _, err := r.exec("CREATE TABLE t(i INTEGER, s TEXT, b BLOB, n TEXT)"); err != nil {
			return err
		}
		if n, err := r.exec("INSERT INTO t VALUES (?, ?, ?, NULL), (?, ?, ?, NULL)", 1, "one", []byte("B1"), 2, "two", []byte("B2")); err != nil || n != 2 {
			t.Fatalf("insert: %d rows, %v", n, err)
		}
		rows, err := r.query("SELECT i, s, b, s FROM t WHERE i >= ? ORDER BY i", 1)
		if err != nil {
			return err
		}
		var got []string
		for rows.Next() {
			var i int64
			var j int
			var s string
			var b []byte
			if err := rows.Scan(&i, &s, &b, &b); err != nil {
				t.Fatal(err)
			}
			rows2 := rows.(*rawRows)
			if err := rows2.Scan(&j, &s, &b, &s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s+":"+string(b))
			if int64(j) != i {
				t.Errorf("int %d, int64 %d", j, i)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != "one:B1,two:B2" {
			t.Errorf("rows %v", got)
		}
		rows, err = r.query("SELECT i, n FROM t LIMIT 1")
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			t.Fatal("no row")
		}
		var s string
		var f float64
		if err := rows.Scan(new(int64), &s); err == nil {
			t.Error("NULL was scanned into a string")
		}
		if err := rows.Scan(&f, &s); err == nil {
			t.Error("an integer was scanned into a float64")
		}
		if err := rows.Scan(&s); err == nil {
			t.Error("one destination for two columns was accepted")
		}
		if _, err := r.exec("INSERT INTO nowhere VALUES (1)"); err == nil {
			t.Error("a statement on a missing table succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Each reader connection's statements are closed by Close, those of a connection that a
// panicking View left behind at once; Views go on working after such a panic.
func TestReaderStatementsClosed(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Hold several Views open at once, so that the pool opens more than one reader.
	var wg sync.WaitGroup
	hold, in := make(chan struct{}), make(chan struct{})
	for range maxReaders {
		wg.Go(func() {
			err := s.View(ctx, func(tx fence.Tx) error {
				in <- struct{}{}
				<-hold
				_, err := tx.Get("x")
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	for range maxReaders {
		<-in // every View holds its own reader connection now
	}
	close(hold)
	wg.Wait()
	s.rmu.Lock()
	readers := len(s.rstmts)
	s.rmu.Unlock()
	if readers != maxReaders {
		t.Fatalf("%d reader connections with statements, want %d", readers, maxReaders)
	}
	func() {
		defer func() { recover() }()
		s.View(ctx, func(fence.Tx) error { panic("boom") })
	}()
	s.rmu.Lock()
	after := len(s.rstmts)
	s.rmu.Unlock()
	if after != readers-1 {
		t.Errorf("after a panicking View %d readers have statements, want %d", after, readers-1)
	}
	if err := s.View(ctx, func(tx fence.Tx) error { _, err := tx.Get("x"); return err }); err != nil {
		t.Fatalf("View after a panicking one: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(s.rstmts) != 0 {
		t.Errorf("Close left the statements of %d readers open", len(s.rstmts))
	}
}

// A View whose context is done while it runs fails with the context's error.
func TestViewContextDone(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	err = s.View(ctx, func(tx fence.Tx) error {
		cancel()
		_, err := tx.Get("x")
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("View with a cancelled context: %v", err)
	}
}
