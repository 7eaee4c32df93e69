package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
)

// linguisticDB creates a database whose default collation is ICU's en-US, a linguistic
// order ('b' < 'B' < 'c', '_' before letters, accents weighed after them), the kind
// of order a server initialised with en_US.UTF-8 (the official image's default) gives every
// column of text; it is dropped when the test ends. It returns the database's URL.
func linguisticDB(tb testing.TB) string {
	tb.Helper()
	raw := testURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("effectfence_test_%d_%s", os.Getpid(), randomHex(4))
	ident := pgx.Identifier{name}.Sanitize()
	_, err = conn.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'")
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "0A000" || pe.Code == "42601") { // feature_not_supported, syntax_error (before PostgreSQL 15)
		tb.Skipf("SKIP: this server cannot create a database collated by ICU: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pgtest.DropDatabase(tb, raw, name) })
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatal(err)
	}
	u.Path = "/" + name
	db, err := pgx.Connect(ctx, u.String())
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close(ctx)
	// The database must order text otherwise than by bytes, or the tests on it show nothing.
	var linguistic bool
	if err := db.QueryRow(ctx, "SELECT 'a' < 'B' AND '_x' < 'Z'").Scan(&linguistic); err != nil || !linguistic {
		tb.Fatalf("the database %s does not order text linguistically (%v)", name, err)
	}
	return u.String()
}

// TestContractLinguisticCollation runs the contract on a database whose text order is not
// byte order: the store must still scan, page and pick CertByHash's record by the intents'
// bytes, as Filter and the other stores do.
func TestContractLinguisticCollation(t *testing.T) {
	t.Parallel()
	db := linguisticDB(t)
	fencetest.Run(t, func(t *testing.T) fence.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := Open(ctx, Config{URL: db, Schema: "effectfence_test_" + randomHex(4)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
