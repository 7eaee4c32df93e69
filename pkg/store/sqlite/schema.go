package sqlite

import "context"

// applicationID marks a SQLite file as an effectfence ledger (PRAGMA application_id): "EFNC".
const applicationID = 0x45464e43

// SchemaVersion is the schema this build writes. Opening a ledger with an older schema for
// writing migrates it; a newer one is refused (a newer effectfence wrote it).
const SchemaVersion = 3

// oldestReadable is the oldest schema a read-only open reads without migrating: every schema
// since has the same tables and columns (version 2 changed only how records are stored), so the
// store's queries run unchanged on it. Version 3 added record_args, which only the pieces of a
// split body are read from (split.go): a ledger of an older version holds no split body, so
// its records are read without that table.
const oldestReadable = 1

// migrations[i] takes a ledger from schema version i to i+1. They run in the transaction that
// also records the new version in meta, so a crash mid-migration (even one that already wrote
// part of the copy to the WAL) leaves the old schema intact: SQLite ignores WAL frames no
// commit covers.
var migrations = []string{
	// 0 -> 1: the first schema.
	`
-- meta holds the schema version, the fencing-token counter, the domain floor and the
-- ledger-wide attempt counters ("counter.<name>"): small rows that most transactions touch,
-- kept together so a transaction writes one page for all of them.
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value ANY NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO meta(key, value) VALUES ('token', 0), ('domain_floor', 0);

-- One row per intent. body is the fence.Record as JSON; the columns beside it exist for
-- the indexes (state for ls and recovery, expires_at for the sweep, cert_hash for parents).
CREATE TABLE records (
	intent     TEXT PRIMARY KEY,
	state      TEXT NOT NULL,
	expires_at INTEGER,
	cert_hash  TEXT,
	body       BLOB NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX records_state ON records(state);
CREATE INDEX records_expires ON records(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX records_cert_hash ON records(cert_hash) WHERE cert_hash IS NOT NULL;

CREATE TABLE domains (
	domain TEXT PRIMARY KEY,
	seq    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE events (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	at     INTEGER NOT NULL,
	intent TEXT NOT NULL,
	kind   TEXT NOT NULL,
	who    TEXT NOT NULL,
	reason TEXT NOT NULL,
	state  TEXT NOT NULL
) STRICT;
CREATE INDEX events_intent ON events(intent, id);
CREATE INDEX events_at ON events(at);
`,

	// 1 -> 2: records becomes a rowid table. In version 1 it was WITHOUT ROWID, a b-tree whose
	// cells hold whole rows: a body over ~1 KB (4 KB pages) spilled to overflow pages, and every
	// key comparison on the way to an intent read them again. Now the intent's b-tree is the
	// UNIQUE index (intent -> rowid, small cells) and bodies sit in the table's leaves, found by
	// rowid and read once. Column names stay, so every query (and an older build that still has
	// the file open) runs unchanged.
	`
CREATE TABLE records_v2 (
	id         INTEGER PRIMARY KEY,
	intent     TEXT NOT NULL UNIQUE,
	state      TEXT NOT NULL,
	expires_at INTEGER,
	cert_hash  TEXT,
	body       BLOB NOT NULL
) STRICT;
INSERT INTO records_v2(intent, state, expires_at, cert_hash, body)
	SELECT intent, state, expires_at, cert_hash, body FROM records ORDER BY intent;
DROP TABLE records;
ALTER TABLE records_v2 RENAME TO records;
CREATE INDEX records_state ON records(state);
CREATE INDEX records_expires ON records(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX records_cert_hash ON records(cert_hash) WHERE cert_hash IS NOT NULL;
`,

	// 2 -> 3: a record's large arguments are stored apart (split.go), so that the commit of a
	// claim, which rewrites the record's row, does not write them again. Nothing is rewritten:
	// every body of version 2 is whole and is read as it is; Put splits the records it writes
	// from now on. The triggers keep record_args to the records that are split: a record
	// deleted (the sweep, a clear, an operator's sqlite3 DELETE) or rewritten whole takes its
	// pieces with it.
	`
CREATE TABLE record_args (
	id    INTEGER PRIMARY KEY, -- the split record's rowid (records.id)
	bytes BLOB NOT NULL
) STRICT;
CREATE TRIGGER records_args_whole AFTER UPDATE OF body ON records
	WHEN substr(new.body, 1, 1) IS NOT x'00'
	BEGIN DELETE FROM record_args WHERE id = new.id; END;
CREATE TRIGGER records_args_deleted AFTER DELETE ON records
	BEGIN DELETE FROM record_args WHERE id = old.id; END;
`,
}

// recordIndexes sets the records table's secondary indexes; every open for writing runs it, in
// the transaction that migrates, after the migrations. It changes no table, column or record,
// so it is not a schema version: a build that still writes schema 2's indexes opens, reads
// and writes a ledger that has these (and does not put its own back), and this build opens
// one that has those and replaces them. A version would have made the previous build refuse
// the file, and its advice (move the file aside) would have lost every receipt. When the
// indexes are already these, it writes nothing.
//
// Each index a transaction changes is one more WAL page before its fsync. A commit at 1.1 KB
// wrote about 8.5 pages (meta, the record's leaf and, as the table grows, its parent, a new
// page and page 1, plus one leaf each of records_state, records_expires and
// records_cert_hash); a claim about 4.
//   - records_cert_hash put an entry at a random leaf on every commit and served only `ledger
//     verify`, which resolves parents from the scan it makes anyway. CertByHash still
//     answers, by a scan of the table.
//   - records_state indexed every record, so a commit moved one entry from the in_flight run
//     to the done run. Its users look only for states that are not done (Recover, `ledger ls
//     --state`), so records_open indexes only those: a few entries on one hot page, which a
//     record leaves when it is done. Scan adds the index's own term to queries for them.
//
// A commit wrote about 7.2 pages at 1.6 KB, 5.2 at 0.8 KB, then (2026-12-06) records_open and
// records_expires became one index, records_life on (state, expires_at, intent):
//   - A commit moved the record out of records_open and into records_expires, two leaves far
//     apart. In records_life it moves from the in_flight run to the end of the done run, the
//     records with the latest expiry: the two runs are neighbours ('done' < 'in_flight'), so
//     with the few records in flight that a ledger has, both are on one leaf.
//   - The engine no longer adds its counters to a transaction that would write meta only for
//     them (txn.AddCounters), such as a commit; they ride in the next claim.
//
// A fresh decision now writes 4 pages for the claim (meta, records_life, the intent's index,
// the table's last leaf) and 2 for its commit (records_life, the table's leaf), against 4 and
// 4 (TestFreshDecisionWritesFewPages).
//
// Records that are not done are read in intent order within a state (Recover, `ledger ls
// --state`, a page of 256 at a time): their expires_at is NULL but for a few that carry
// their done record's expiry, so Scan reads each state as two runs of records_life, the NULL
// one in intent order straight from the index and the rest sorted, and merges them
// (openStatesQuery). Scans of done records in intent order name the state as +state: SQLite
// would otherwise read every done record from records_life and sort them, on every page.
//
// An earlier build opening a ledger that has records_life keeps it and puts records_open back
// (IF NOT EXISTS), so its queries keep their index, and the next open by this build drops it
// again; it does not put records_expires back (only a migration made it), and its sweep,
// whose query names state = 'done' and orders by expires_at, reads records_life in order
// (TestAnEarlierBuildsQueriesUseRecordsLife).
const recordIndexes = `
DROP INDEX IF EXISTS records_state;
DROP INDEX IF EXISTS records_cert_hash;
DROP INDEX IF EXISTS records_open;
DROP INDEX IF EXISTS records_expires;
CREATE INDEX IF NOT EXISTS records_life ON records(state, expires_at, intent);
`

// eventTokens gives the events table its token column (fence.Event.Token: the claim whose
// holder reported a release, abort or lost, by which a retry of a release that landed, its
// answer lost, is recognised). Every open for writing runs it, in the transaction that
// migrates, when the column is missing. Like recordIndexes it is not a schema version: a
// build that does not know the column names the columns it inserts and reads, so it opens,
// reads and writes a ledger that has it (its events get token 0), where a version would have
// made it refuse the file. Before, the SQLite store kept no tokens, so (only) on SQLite a
// release retried after it landed was refused lease_lost, "no claim is recorded", counted and
// audited as a late result, while a memory or PostgreSQL ledger answered it as recorded.
const eventTokens = `ALTER TABLE events ADD COLUMN token INTEGER NOT NULL DEFAULT 0`

// hasEventTokens reports whether the events table has its token column.
func hasEventTokens(ctx context.Context, q querier) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info('events') WHERE name = 'token'").Scan(&n)
	return n > 0, err
}
