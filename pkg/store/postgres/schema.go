package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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

// migrate creates or upgrades the schema. It holds a transaction-scoped advisory lock keyed by
// the schema name, so processes starting at once take turns and each finds the work done.
func migrate(ctx context.Context, conn *pgx.Conn, schema string, create bool) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schema, "migrate", "")); err != nil {
		return err
	}
	if create {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("creating schema %q: %w", schema, err)
		}
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS effectfence_version (version integer NOT NULL)"); err != nil {
		return err
	}
	var have int
	err = tx.QueryRow(ctx, "SELECT version FROM effectfence_version").Scan(&have)
	switch {
	case err == pgx.ErrNoRows:
		if _, err := tx.Exec(ctx, "INSERT INTO effectfence_version (version) VALUES (0)"); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	if have > schemaVersion {
		return fmt.Errorf("the ledger schema is version %d, newer than this build understands (%d): upgrade effectfence", have, schemaVersion)
	}
	for v := have; v < schemaVersion; v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrating the ledger schema to version %d: %w", v+1, err)
		}
	}
	if have < schemaVersion {
		if _, err := tx.Exec(ctx, "UPDATE effectfence_version SET version = $1", schemaVersion); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
