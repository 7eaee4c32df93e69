package fence_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/postgres"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A done record whose cert did not survive (its "cert" member's name damaged by a flipped
// byte, or the member edited away by hand) still reads as JSON. The ledger then holds a done
// intent with nothing to replay: a duplicate must be refused with an error saying the record
// is damaged and what to do (nothing run), never a nil dereference. Before, Prepare
// dereferenced the nil cert (a replay copies it; an attempt past the replay window moves the
// record aside under its cert's hash): on PostgreSQL the panic took the process down, on
// SQLite the store turned it into "transaction function panicked" with a goroutine dump.
func TestDoneRecordWithoutItsCertIsAnErrorNotAPanic(t *testing.T) {
	req := fence.Request{Intent: "charge:order-9", Tool: "charge", Args: []byte(`{"usd":9}`)}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		open := func() fence.Store {
			st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		damage := func() {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var body []byte
			if err := db.QueryRow(`SELECT body FROM records WHERE intent = ?`, req.Intent).Scan(&body); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`UPDATE records SET body = ? WHERE intent = ?`, withoutCert(t, body), req.Intent); err != nil {
				t.Fatal(err)
			}
		}
		checkDoneWithoutCert(t, req, open, damage)
	})
	t.Run("postgres", func(t *testing.T) {
		url := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
		if url == "" {
			t.Skip("SKIP-REQUIRED: EFFECTFENCE_TEST_POSTGRES is not set")
		}
		ctx := context.Background()
		schema := fmt.Sprintf("effectfence_test_%d_nocert", os.Getpid())
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		// The schema is dropped, then the connection closed, once the subtest's stores are
		// closed (a deferred Close ran first, and every run left its schema behind).
		t.Cleanup(func() {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = conn.Close(ctx)
		})
		open := func() fence.Store {
			st, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema, MaxConns: 2, Brief: true})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		damage := func() {
			table := pgx.Identifier{schema, "effectfence_records"}.Sanitize()
			var body []byte
			if err := conn.QueryRow(ctx, `SELECT body FROM `+table+` WHERE intent = $1`, req.Intent).Scan(&body); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `UPDATE `+table+` SET body = $1 WHERE intent = $2`, withoutCert(t, body), req.Intent); err != nil {
				t.Fatal(err)
			}
		}
		checkDoneWithoutCert(t, req, open, damage)
	})
}

// withoutCert is body with one byte of its "cert" member's name changed.
func withoutCert(t *testing.T, body []byte) []byte {
	t.Helper()
	damaged := bytes.Replace(body, []byte(`"cert":`), []byte(`"cerx":`), 1)
	if bytes.Equal(damaged, body) {
		t.Fatalf("the record has no cert member to damage: %s", body)
	}
	return damaged
}

func checkDoneWithoutCert(t *testing.T, req fence.Request, open func() fence.Store, damage func()) {
	ctx := context.Background()
	eng := fence.New(open(), fence.Config{})
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("first prepare: %+v %v", adm, err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charged":9}`)); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	damage()
	eng = fence.New(open(), fence.Config{})
	defer eng.Close()
	for _, window := range []time.Duration{0, time.Nanosecond} {
		r := req
		r.ReplayWindow = window
		var panicked any
		adm, err := func() (fence.Admission, error) {
			defer func() { panicked = recover() }()
			return eng.Prepare(ctx, r)
		}()
		switch {
		case panicked != nil:
			t.Errorf("replay window %v: Prepare panicked on a done record without its cert: %v", window, panicked)
		case err == nil:
			t.Errorf("replay window %v: Prepare answered %+v for a done record without its cert; want an error (nothing run)", window, adm)
		case !errors.As(err, new(*fence.UnreadableError)):
			t.Errorf("replay window %v: Prepare: %v; want an UnreadableError naming the damaged record", window, err)
		}
	}
}
