package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// migrations are applied in order; migrations[i] brings the schema from version i to i+1.
// Never edit a released step: append a new one.
var migrations = []string{
	// 1: the ledger.
	`
CREATE TABLE effectfence_meta (
	key   text PRIMARY KEY,
	value bigint NOT NULL
);
INSERT INTO effectfence_meta (key, value) VALUES ('floor', 0);

-- One row per intent. body is the JSON of fence.Record exactly as the engine gave it; the other
-- columns are copies for queries.
CREATE TABLE effectfence_records (
	intent     text PRIMARY KEY,
	state      text NOT NULL,
	expires_at timestamptz,
	cert_hash  text,
	body       bytea NOT NULL
);
CREATE INDEX effectfence_records_state ON effectfence_records (state, intent);
CREATE INDEX effectfence_records_expiry ON effectfence_records (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX effectfence_records_cert ON effectfence_records (cert_hash) WHERE cert_hash IS NOT NULL;

CREATE TABLE effectfence_domains (
	domain text PRIMARY KEY,
	seq    bigint NOT NULL
);

-- Fencing tokens. CACHE 1 (the default) keeps them increasing across sessions, not only
-- within one.
CREATE SEQUENCE effectfence_token AS bigint MINVALUE 1 NO CYCLE;

CREATE TABLE effectfence_events (
	id     bigserial PRIMARY KEY,
	at     timestamptz NOT NULL,
	intent text NOT NULL,
	kind   text NOT NULL,
	body   bytea NOT NULL
);
CREATE INDEX effectfence_events_intent ON effectfence_events (intent, id);
CREATE INDEX effectfence_events_at ON effectfence_events (at);

-- Counters are sharded: one row per (store instance, connection), summed on read, so no two
-- transactions ever wait for each other on a counters row.
CREATE TABLE effectfence_counters (
	shard         text PRIMARY KEY,
	updated_at    timestamptz NOT NULL,
	admitted      bigint NOT NULL DEFAULT 0,
	reclaimed     bigint NOT NULL DEFAULT 0,
	replayed      bigint NOT NULL DEFAULT 0,
	coalesced     bigint NOT NULL DEFAULT 0,
	stale         bigint NOT NULL DEFAULT 0,
	race          bigint NOT NULL DEFAULT 0,
	in_flight     bigint NOT NULL DEFAULT 0,
	prior_failure bigint NOT NULL DEFAULT 0,
	conflict      bigint NOT NULL DEFAULT 0,
	lease_lost    bigint NOT NULL DEFAULT 0
);

-- Processes waiting for an in-flight intent to finish (see Store.Watch). UNLOGGED: a waiter
-- outlives no crash, and registering costs no WAL flush.
CREATE UNLOGGED TABLE effectfence_waiters (
	intent     text NOT NULL,
	listener   text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (intent, listener)
);

-- effectfence_must turns a compare-and-swap that matched no row into a serialization failure
-- (SQLSTATE 40001), so a write queued without waiting for its answer still aborts the
-- transaction, and the store retries the whole decision.
CREATE FUNCTION effectfence_must(n bigint, what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	IF n = 0 THEN
		RAISE EXCEPTION 'effectfence: % moved under this transaction', what USING ERRCODE = '40001';
	END IF;
END
$$;
`,
}

// schemaVersion is the version this build writes.
var schemaVersion = len(migrations)

// recordIndexes sets the secondary indexes of the schema's effectfence_records, in the
// transaction that migrates, after the migrations, when the catalog shows another set
// (indexesCurrent); it writes nothing when they are already these. It changes no table,
// column or row, so it is not a schema version: the version check refuses a schema newer
// than the build, and a build that still creates version 1's indexes (state, cert) runs
// unchanged against a ledger that has these (its queries are the same; see
// DECISIONS-postgres.md), while this build replaces them when it opens a ledger that has
// those. Version 1 creates them; a new ledger gets them there and loses them here, in the
// same transaction.
//
// A commit changes the record's state, expires_at and cert_hash, so its new row version is
// not a HOT update and goes into every index whose key or predicate it satisfies. Version 1's
// four were the primary key, (state, intent) for every record, the expiry (done records,
// time-ordered) and cert_hash (done records); the state and cert entries landed at a random
// leaf, which after each checkpoint also logs that whole page. Now:
//   - effectfence_records_cert is gone: no command looks certs up by hash (ledger verify
//     resolves parents from its own scan), and CertByHash answers by a scan of the table, as
//     the SQLite ledger's does.
//   - effectfence_records_open indexes only the records that are not done, the only states
//     anything looks for by state (Recover: in_flight; ledger ls --state: in_flight by default,
//     failed, unknown); a commit's done row gets no entry. Scan adds the index's own predicate
//     to such queries, so a generic plan can use it (a custom plan proves it from the states).
//
// Measured on 100k records (PostgreSQL 15, 2 cores): the commit's UPDATE 46 µs -> 17 µs of
// server time, WAL per commit ~6.9 KB -> 1.2 KB right after a checkpoint (no full-page image
// of a random index leaf).
func recordIndexes(schema string) string {
	q := pgx.Identifier{schema}.Sanitize() + "."
	return `DROP INDEX IF EXISTS ` + q + `effectfence_records_state;
DROP INDEX IF EXISTS ` + q + `effectfence_records_cert;
CREATE INDEX IF NOT EXISTS effectfence_records_open ON ` + q + `effectfence_records (state, intent) WHERE state <> 'done';`
}

// indexesCurrent asks whether the schema ($1) has exactly recordIndexes' secondary indexes of
// effectfence_records, by name.
const indexesCurrent = `SELECT count(*) FILTER (WHERE indexname = 'effectfence_records_open') = 1
	AND count(*) FILTER (WHERE indexname IN ('effectfence_records_state', 'effectfence_records_cert')) = 0
	FROM pg_indexes WHERE schemaname = $1 AND tablename = 'effectfence_records'`

// ErrNoLedger is Open's error, with Config.Existing, for a schema that holds no ledger.
var ErrNoLedger = errors.New("no ledger")

// ErrReadOnly is Open's error for a server that cannot take the ledger's writes: a standby in
// recovery, or a session read-only by default. Every claim and outcome is a write, so such a
// ledger could answer nothing; the store does not turn default_transaction_read_only off by
// itself, since a failover tool may have set it to fence off an old primary.
var ErrReadOnly = errors.New("the server does not take writes")

// writable returns ErrReadOnly, with what to do, unless the session may write.
func writable(ctx context.Context, conn *pgx.Conn) error {
	var recovery bool
	var readOnly string
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')").Scan(&recovery, &readOnly); err != nil {
		return err
	}
	switch {
	case recovery:
		return fmt.Errorf("%w: it is a standby in recovery (read-only); the ledger must be on the primary, which records every claim and outcome. "+
			"With several hosts in the URL (host=a,b), add target_session_attrs=read-write so that the store connects to the one that takes writes", ErrReadOnly)
	case readOnly == "on":
		return fmt.Errorf("%w: its sessions are read-only (default_transaction_read_only is on for this role, the database or the server, or in the URL); "+
			"the ledger records every claim and outcome: point it at a server that takes writes, or turn the setting off for the store's role "+
			"(ALTER ROLE … SET default_transaction_read_only = off)", ErrReadOnly)
	}
	return nil
}

// migrate creates or upgrades the schema. It holds a transaction-scoped advisory lock keyed by
// the schema name, so processes starting at once take turns and each finds the work done.
// With existing, a schema without the ledger's version table is refused (ErrNoLedger) before
// anything is created. beside names the other schemas of the database that held a ledger when
// migrate created this one (its version row), or found it unused (no claim ever made in it);
// nil when the ledger was there and used.
func migrate(ctx context.Context, conn *pgx.Conn, schema string, create, existing bool) (beside []string, err error) {
	if err := writable(ctx, conn); err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schema, "migrate", "")); err != nil {
		return nil, err
	}
	if existing {
		var found bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass(format('%I.effectfence_version', $1::text)) IS NOT NULL", schema).Scan(&found); err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w in schema %q: nothing has used it yet (check the search_path of the URL)", ErrNoLedger, schema)
		}
	}
	if create {
		// Only a schema that is missing is created: PostgreSQL checks CREATE on the database
		// before IF NOT EXISTS looks, so a role that owns an existing schema (and may not
		// create schemas, as docs/postgres.md allows) was refused "permission denied for
		// database" (TestOpenInAnExistingSchemaNeedsNoDatabaseCreate).
		var found bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&found); err != nil {
			return nil, err
		}
		if !found {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
				return nil, fmt.Errorf("creating schema %q: %w", schema, err)
			}
		}
	}
	// The tables are created and used by unqualified names: the session's search_path must
	// reach the ledger's schema first, or they would be another schema's (public's, for a
	// pooler that dropped the search_path the store sent). Checked before anything is created.
	if err := reachesSchema(ctx, tx, schema); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS effectfence_version (version integer NOT NULL)"); err != nil {
		return nil, err
	}
	var have int
	err = tx.QueryRow(ctx, "SELECT version FROM effectfence_version").Scan(&have)
	created := err == pgx.ErrNoRows
	switch {
	case err == pgx.ErrNoRows:
		if _, err := tx.Exec(ctx, "INSERT INTO effectfence_version (version) VALUES (0)"); err != nil {
			return nil, err
		}
		if beside, err = ledgersBeside(ctx, tx, schema); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	if have > schemaVersion {
		return nil, fmt.Errorf("the ledger schema is version %d, newer than this build understands (%d): upgrade effectfence", have, schemaVersion)
	}
	if have < 0 {
		// Only 0 (before the first migration, in this transaction) and the versions the
		// migrations reach are ever written: the row was edited or damaged. It indexed the
		// migrations (a panic).
		return nil, fmt.Errorf("effectfence_version records schema version %d, which no effectfence ledger has (edited or damaged); nothing was changed", have)
	}
	for v := have; v < schemaVersion; v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return nil, fmt.Errorf("migrating the ledger schema to version %d: %w", v+1, err)
		}
	}
	if have < schemaVersion {
		if _, err := tx.Exec(ctx, "UPDATE effectfence_version SET version = $1", schemaVersion); err != nil {
			return nil, err
		}
	}
	if !created && !existing { // an operator's look (existing) warns of nothing
		// Found: a ledger no claim has used yet (its token sequence never drawn from, no
		// record) is told of as one made here is. It may be the one an earlier Open made
		// whose COMMIT landed and its answer was lost: the retry found it, and its warning
		// was never given (TestLostAnswerDuringFirstOpen).
		var unused bool
		if err := tx.QueryRow(ctx, "SELECT NOT is_called AND NOT EXISTS (SELECT 1 FROM effectfence_records) FROM effectfence_token").Scan(&unused); err != nil {
			return nil, err
		}
		if unused {
			if beside, err = ledgersBeside(ctx, tx, schema); err != nil {
				return nil, err
			}
		}
	}
	var current bool
	if err := tx.QueryRow(ctx, indexesCurrent, schema).Scan(&current); err != nil {
		return nil, err
	}
	if !current {
		if err := setRecordIndexes(ctx, tx, schema); err != nil {
			return nil, fmt.Errorf("setting the ledger's record indexes: %w", err)
		}
	}
	return beside, tx.Commit(ctx)
}

// ledgersBeside names the schemas of the database other than schema that hold a ledger (an
// effectfence_version table), from the catalog, which every role may read: a schema the role
// may not use is named too.
func ledgersBeside(ctx context.Context, tx pgx.Tx, schema string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname = 'effectfence_version' AND c.relkind IN ('r', 'p') AND n.nspname <> $1 ORDER BY 1`, schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// reachesSchema returns an error unless the session's current schema (the first schema of its
// search_path that exists) is schema.
func reachesSchema(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) error {
	var current string
	if err := q.QueryRow(ctx, "SELECT coalesce(current_schema(), '')").Scan(&current); err != nil {
		return err
	}
	if current == schema {
		return nil
	}
	// A schema the role may not use is left out of its search path, so it is never current:
	// say that, not that it should be named first (it is).
	var usage bool
	var role string
	if err := q.QueryRow(ctx, "SELECT coalesce((SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = $1), true), current_user", schema).Scan(&usage, &role); err != nil {
		return err
	}
	if !usage {
		return fmt.Errorf("the role %q may not use the ledger schema %q (it lacks USAGE on it, so the session's search_path leaves it out): "+
			"GRANT USAGE, CREATE ON SCHEMA %s TO %s, or use a role that owns the schema", role, schema, pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize())
	}
	var sp string
	if err := q.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&sp); err != nil {
		return err
	}
	return fmt.Errorf("the ledger schema resolves to %q but the server session's search_path (%s) reaches %q first: name the schema first in search_path. "+
		"A pooler in transaction mode drops the search_path a client sends (PgBouncer with search_path in ignore_startup_parameters): "+
		"set it for the role instead (ALTER ROLE … SET search_path = …), or connect directly or through a pooler in session mode", schema, sp, current)
}

// setRecordIndexes runs recordIndexes in a savepoint of the migration transaction. Dropping and
// creating an index takes ownership of the table: a role that writes the ledger's rows
// without owning its tables (an application role beside the owner) opened a ledger with
// version 1's indexes before this change, and still does. For it the indexes stay as they
// are, which the queries are correct on (the previous build runs on them), until an open as
// the owner replaces them.
//
// The change waits at most indexLockWait for the records table: DROP INDEX needs it to itself,
// and while it waits for a transaction that holds it (a long `ledger export`, say) every other
// process's reads and writes of the table queue behind it. If it cannot have the table by
// then, the indexes also stay as they are for a later open, and the open goes on.
func setRecordIndexes(ctx context.Context, tx pgx.Tx, schema string) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, "SET LOCAL lock_timeout = "+indexLockWait+";\n"+recordIndexes(schema)); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "42501" && pe.Code != "55P03") { // insufficient_privilege, lock_not_available
			return err
		}
		return sp.Rollback(ctx)
	}
	return sp.Commit(ctx)
}

// indexLockWait bounds how long an open waits for the records table to replace its indexes
// (setRecordIndexes): long enough for PostgreSQL's deadlock check (deadlock_timeout, 1 s by
// default) to reorder a queue the open has joined, short enough that the others' stall is
// seconds, once per open, until one finds the table free.
const indexLockWait = "'3s'"
