// Package postgres is a fence.Store on PostgreSQL (pgx v5), for several gateway processes or
// hosts that must share one fence.
//
// The guarantee: every Update is one PostgreSQL transaction, committed (WAL flushed under the
// server's synchronous_commit) before Update returns nil, and two Updates that touch the same
// intent never interleave, whichever process or host runs them. Updates on distinct intents do
// not wait for each other: nothing is serialised on one row or one lock.
//
// How:
//   - Each intent is guarded by a transaction-scoped advisory lock keyed by a 64-bit hash of
//     (schema, intent), taken before the record is read and held to commit or rollback. It
//     also guards an intent that has no row yet, which a row lock could not.
//   - Domain sequence numbers are compare-and-swapped: the value a transaction first read is
//     the value its write must still find. A lost swap aborts the transaction (SQLSTATE 40001)
//     and Update runs the decision again on fresh data; the engine then refuses with
//     domain_race or takes the next number, as SPEC §3 asks. A decision run again after a
//     lost swap locks the domain rows it reads (FOR UPDATE), so a hot domain costs one retry,
//     not a storm of them.
//   - Fencing tokens come from a SEQUENCE; counters are one row per (store, connection),
//     summed on read; Tx.Now is the database's clock_timestamp() read under the intent's
//     lock (a one-statement commit: below), so leases mean the same on every host.
//   - BEGIN travels with the first read; writes are queued and travel with the next read or
//     with COMMIT; an Update's Get also fetches the next fencing token (a token no one uses
//     is simply skipped). An admission costs 2 round trips and its commit 2, or each 1
//     (below).
//   - A commit of a claim this store wrote is first tried as one autocommit batch, one round
//     trip (spec.go): the store remembers the claims it wrote, fn runs against the
//     remembered one, and its writes are sent behind the intent's lock, guarded: they are
//     made only if the record is still exactly that claim and the clock fn used (the claim's
//     database time plus the local monotonic time elapsed since) is not ahead of the
//     database's clock nor more than 100 ms behind it. Otherwise nothing is written and fn
//     runs again in a transaction.
//   - A fresh claim is likewise first tried as one autocommit batch (spec.go) once the store
//     has read the server's clock: fn is told the intent has no record, its clock is the
//     last reading moved on, and its token is fence.PendingToken; the statement after the
//     intent's lock draws the token and writes the claim (its body spliced around the
//     token's digits) only if the intent still has no record and the clock is within 100 ms
//     behind the database's. The engine learns the token through fence.LateToken.
//   - Few statements per round trip: the first intent lock also reads the clock and the
//     transaction id, a Get reads the record and the next token in one statement, and a
//     record write carries the notification of waiters of a claim it ends and the counters
//     added right after it. The server and pgx pay per statement: a fresh call (admission
//     and commit) runs 4 when both are one statement, 7 when the claim is a transaction, 10
//     when the commit is too.
//
// Connection loss: an Update whose connection dies before COMMIT was sent did not commit and
// returns an error saying so. If it dies after COMMIT was sent, the store asks the server on a
// new connection whether the transaction committed (txid_status) and answers accordingly; only
// when the server cannot be reached either does it return a CommitUnknownError. A
// one-statement commit whose answer is lost is settled by running fn in a transaction: the
// record tells whether the statement landed, and if it did not, the transaction's write makes
// its guard fail wherever it still is. A one-statement claim whose answer is lost is settled
// under the intent's lock once the database's clock is past the claim's guard. The pool
// replaces dead connections, so the next call reconnects. The counters a commit of unknown outcome carried are the store's to settle
// (doubt.go): it adds them once it learns the commit did not land, so they count once.
package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectfence/effectfence/pkg/fence"
)

// Config says how to reach the ledger.
type Config struct {
	// URL is a postgres:// or postgresql:// connection string (pgx syntax; pool_max_conns and
	// search_path are honoured). Open refuses anything else, the empty string of the zero
	// Config and libpq's key=value form included.
	URL string
	// Schema holds the ledger's tables; it is created if missing. Empty: the first schema of
	// the URL's search_path, else the server's default (normally public).
	Schema string
	// MaxConns bounds the pool (0: the URL's pool_max_conns, else 16).
	MaxConns int32
	// Existing opens only a ledger that is there already: Open creates no schema and no
	// table, and a schema that holds no ledger is refused with ErrNoLedger. The ledger
	// commands set it: an operator's look never creates a ledger, and a mistyped search_path
	// must not read as an empty ledger (nothing fenced) while it creates one.
	Existing bool
	// Brief is for a command that runs a few transactions one after another and exits (the
	// ledger commands): no warm pool. Otherwise Open keeps 8 connections open from the start
	// (pool_min_conns), which a long-running fence (wrap, serve, the gateway) answers from at
	// once; a one-shot `effectfence ledger ls` holding 8 of the server's connections made a
	// busy server refuse others ("too many clients", seen in CI beside wraps writing).
	Brief bool
	// Lease is the lease of the fence over this store (fence.Config.LeaseTTL; 0: the fence's
	// default). A third of it, from 1 s to 20 s, bounds how long a connection may leave what it
	// sent unacknowledged before it is given up (see unacknowledged).
	Lease time.Duration

	// wrapConn, when set (tests only), wraps every new network connection.
	wrapConn func(net.Conn) net.Conn
}

// Store is a fence.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	schema   string
	spoolKey string // see SpoolKey
	chanName string // the NOTIFY channel of schema (see channel)
	instance string // names this store's counter shards

	// hook, when set (tests only), is called at named points of a transaction with the
	// backend pid of its connection.
	hook func(stage string, pid uint32)
	// rowsHeld, when set (tests only), is told how many rows a Scan or Events holds at once,
	// page by page.
	rowsHeld func(n int)
	// scanPage, when set (tests only), is the page size of Scan and Events in place of
	// scanPage's.
	scanPage int

	// hot remembers domains whose swap was lost recently (domain -> time.Time): reads of
	// them lock the row from the first attempt, so callers queue instead of failing.
	hot sync.Map

	// claims remembers the claims this store wrote, for one-statement commits (spec.go);
	// noSpeculation (tests only) turns those off.
	claims        claimCache
	noSpeculation atomic.Bool
	// clock is the server's clock as last read, and the local instant it arrived: the base of
	// a speculative claim's clock. noFreshSpeculation (tests only) turns those claims off.
	clock              atomic.Pointer[clockReading]
	noFreshSpeculation atomic.Bool

	// path keeps every connection's search_path on schema (pathPin); pinned does so for
	// one transaction, carried by its first statement, and qual names the tables of a
	// statement run alone with their schema (see pathPin).
	path   *pathPin
	pin    searchPin
	pinned string
	qual   *strings.Replacer
	// beside names the other ledgers' schemas when Open created this ledger (CreatedBeside).
	beside []string
	// doubts are commits whose answers were lost, with the counters they carried (doubt.go).
	doubts doubts
	// warns are the connections the server sent a WARNING on (standby.go).
	warns *warnings

	closeOnce  sync.Once
	listenOnce sync.Once
	listener   *listener // started by the first Watch
}

var _ fence.Store = (*Store)(nil)

// maxAttempts bounds how often Update runs a decision whose compare-and-swap lost or that hit
// a deadlock or serialization failure.
const maxAttempts = 64

// checkURL refuses a Config.URL that is not a postgres:// or postgresql:// URL. pgx reads
// anything: an empty string connects wherever libpq's defaults lead (PGHOST or this host's
// socket, the database named after the user), and a key=value string is taken as well; a
// process whose URL was unset (the zero Config) kept a ledger of its own there, beside the one
// its peers shared, and ran again what they had run. The spool's name and redaction read a
// URL too. The string itself is not quoted: it may hold a password.
func checkURL(raw string) error {
	const form = "postgres://user@host:port/dbname?sslmode=…"
	switch {
	case raw == "":
		return fmt.Errorf("postgres ledger: no URL (Config.URL is empty): name the ledger's database as %s; an empty one would open a ledger wherever libpq's defaults lead, which other processes need not share", form)
	case !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://"):
		return fmt.Errorf("postgres ledger: Config.URL is not a postgres:// or postgresql:// URL (a key=value connection string, another scheme, or the scheme in other letter cases or after a space): write it as %s", form)
	}
	return nil
}

// Open connects, creates or migrates the schema, and returns the store.
func Open(ctx context.Context, c Config) (*Store, error) {
	if err := checkURL(c.URL); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres ledger %s: %w", Redact(c.URL), err)
	}
	switch {
	case c.MaxConns > 0:
		pc.MaxConns = c.MaxConns
	case !strings.Contains(c.URL, "pool_max_conns"):
		pc.MaxConns = 16
	}
	if !strings.Contains(c.URL, "pool_min_conns") && !c.Brief {
		pc.MinConns = min(8, pc.MaxConns)
	}
	// pgxpool takes a minimum above the size without a word, and warm then waits for
	// connections the pool may never open: Open hung (wrap never started).
	if pc.MinConns > pc.MaxConns {
		return nil, fmt.Errorf("postgres ledger %s: pool_min_conns=%d is more than the pool may hold (pool_max_conns=%d; 16 when the URL does not say): lower pool_min_conns or raise pool_max_conns",
			Redact(c.URL), pc.MinConns, pc.MaxConns)
	}
	if c.Brief {
		// The ledger commands read the URL the fence's processes read, with the warm pool a
		// fleet tunes there (pool_min_conns, pool_min_idle_conns): a brief store keeps none.
		pc.MinConns, pc.MinIdleConns = 0, 0
	}
	// A one-statement commit (spec.go) runs in an implicit transaction, at the session's
	// default level: its guard must read the record as committed once the intent's lock is
	// held, which only READ COMMITTED does (a REPEATABLE READ snapshot predates the lock).
	pc.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	// Intents, domains and tool names travel as text, which pgx sends and reads as UTF-8
	// whatever the session's client_encoding says. A role's or a database's LATIN1 (say) made
	// the server convert those bytes as LATIN1: "café" was recorded as "cafÃ©", another intent
	// than the one a process at UTF8 reads and claims, and the same call, claimed through
	// both, ran twice (TestClientEncodingOfTheRoleDoesNotSplitAnIntent). PgBouncer takes this
	// parameter at connect in every pool mode.
	pc.ConnConfig.RuntimeParams["client_encoding"] = "UTF8"
	// A COMMIT must be durable before the fence answers (SPEC §4). synchronous_commit is the
	// session's to choose, and a role, a database or the URL may default it to off (a common
	// tuning for applications that can lose their last commits): COMMIT then returns before
	// the WAL is flushed, and a server crash loses the last receipts, so duplicates run again.
	// Each connection turns it back on when it is off or local, and keeps a stronger setting
	// (remote_apply, remote_write). local waits for the primary's disk alone, also where a
	// synchronous standby is named: a failover to that standby then loses the last receipts
	// (TestFailoverToASynchronousStandby); without one, on and local are the same. Behind a
	// pooler in transaction mode a connection is not a server session: every write
	// transaction also sets it for itself (durable, tx.go). The same statement pins the
	// connection's search_path once the store knows its schema (pathPin.afterConnect).
	path := &pathPin{}
	pc.AfterConnect = path.afterConnect
	// A COMMIT whose wait for a synchronous standby was cancelled succeeds with a WARNING
	// (standby.go).
	warns := &warnings{}
	pc.ConnConfig.OnNotice = warns.notice
	// A connection whose network drops its packets, without a reset, is given up a third of
	// the lease on (unacknowledged), not after the kernel's 15 min of retransmissions
	// (TestClaimOverABlackholedNetworkEnds). A connect_timeout of the URL bounds the connect
	// as pgx's own dialer did.
	unacked := unacknowledged(c.Lease)
	connect := pc.ConnConfig.ConnectTimeout
	if connect == 0 {
		connect = unacked
	}
	pc.ConnConfig.DialFunc = dialer(connect, unacked).DialContext
	if !strings.Contains(c.URL, "pool_ping_timeout") {
		pc.PingTimeout = pingBound
	}
	if c.wrapConn != nil {
		dial := pc.ConnConfig.DialFunc
		pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return c.wrapConn(nc), nil
		}
	}
	// The schema is named exactly (Config.Schema, quoted into search_path) or by the first
	// element of the URL's search_path as written, which PostgreSQL resolves (see init).
	schema, first := c.Schema, ""
	if schema != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	} else if sp := pc.ConnConfig.RuntimeParams["search_path"]; sp != "" {
		first = firstPathElement(sp)
	}
	pc.PrepareConn = path.prepare
	pc.BeforeClose = path.forget
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres ledger %s: %w", Redact(c.URL), err)
	}
	s := &Store{pool: pool, instance: fence.LocalOwner() + "/" + randomHex(6), warns: warns, path: path}
	if err := s.init(ctx, schema, first, c.Existing); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres ledger %s: %w%s", Redact(c.URL), err, poolerHint(err))
	}
	return s, nil
}

// poolerHint explains the errors pgx's cached prepared statements meet behind a pooler in
// transaction mode that does not keep them (PgBouncer before 1.21, or without
// max_prepared_statements): a statement prepared on one server connection is missing on, or
// already prepared differently on, the next one the pooler hands over.
func poolerHint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P05" || pe.Code == "26000") {
		return ". Behind a pooler in transaction mode, add default_query_exec_mode=exec (or simple_protocol) to the URL, " +
			"or let the pooler keep prepared statements (PgBouncer 1.21 or later, max_prepared_statements)"
	}
	return ""
}

// init resolves the ledger's schema name as PostgreSQL does and creates or migrates it.
// Advisory-lock keys and NOTIFY channels are derived from the resolved name, so every
// spelling of one schema (search_path=review_case, Review_Case, "review_case") takes the same
// locks; a quoted "Review_Case" is another schema, with its own tables and locks.
func (s *Store) init(ctx context.Context, schema, first string, existing bool) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	create := schema != ""
	// "$user" stands for the role's schema quoted or not (the server's own default is written
	// "$user", public): before 2026-12-07 the quoted one was taken for a schema named $user,
	// and Open was refused, saying the path did not reach it (TestQuotedUserFirstOnThePath).
	if schema == "" && first != "" && first != "$user" && first != `"$user"` {
		// parse_ident applies the identifier rules: unquoted names fold to lower case,
		// quoted ones are kept as written.
		var parts []string
		if err := conn.QueryRow(ctx, "SELECT parse_ident($1)", first).Scan(&parts); err != nil {
			return fmt.Errorf("search_path starts with %q, which is not a schema name: %w", first, err)
		} else if len(parts) != 1 {
			return fmt.Errorf("search_path starts with %q, which is not a schema name (a qualified name has %d parts)", first, len(parts))
		}
		schema, create = parts[0], true
	}
	if schema != "" {
		// PostgreSQL cuts an identifier longer than 63 bytes (NAMEDATALEN - 1) to that, on a
		// character's boundary, wherever it reads one: search_path and CREATE SCHEMA reach the
		// cut name (a cast to name cuts so). Every name that starts with those bytes reaches
		// one schema: two accounts' ledgers named apart past the 63rd byte were one ledger,
		// where a call of one was answered with the other's receipt and never ran. Such a name
		// is refused, naming the schema PostgreSQL would use; until 2026-12-07 the store cut it
		// as the server does (TestLongSchemaNamesAreRefused).
		var cut string
		var most int
		if err := conn.QueryRow(ctx, "SELECT $1::text::name::text, current_setting('max_identifier_length')::int", schema).Scan(&cut, &most); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "22021" {
				return fmt.Errorf("the ledger's schema name %q is not one PostgreSQL can hold (a NUL, or not UTF-8): %w", schema, err)
			}
			return err
		}
		if cut != schema {
			return fmt.Errorf("the ledger's schema name %q is %d bytes, longer than PostgreSQL keeps of a name (%d): it would use the schema %q, which every name that starts with those bytes reaches, so ledgers named apart only after them would be one ledger. "+
				"Name the schema in at most %d bytes (search_path=%s reaches the schema this name would); nothing was created",
				schema, len(schema), most, cut, most, pgx.Identifier{cut}.Sanitize())
		}
	}
	if schema == "" {
		// NULL when no schema on the search path exists (search_path empty, or $user with no
		// schema of that name): then the error below, not a failed scan.
		var sp string
		if err := conn.QueryRow(ctx, "SELECT coalesce(current_schema(), ''), current_setting('search_path')").Scan(&schema, &sp); err != nil {
			return err
		}
		if schema == "" {
			// The path may be set (in options, for the role or the database) and name only
			// schemas that do not exist: the store creates the schema of the URL's
			// search_path parameter alone.
			return fmt.Errorf("no schema is selected: set search_path in the URL (the session's search_path, %q, names no schema that exists; the store creates the first schema of the URL's search_path parameter, not one named in options or set for the role or the database)", sp)
		}
		if err := ledgerFurtherOn(ctx, conn, schema, sp); err != nil {
			return err
		}
	}
	s.schema, s.chanName = schema, channelOf(schema)
	qs := pgx.Identifier{schema}.Sanitize()
	s.qual = strings.NewReplacer("FROM effectfence_", "FROM "+qs+".effectfence_", "INTO effectfence_", "INTO "+qs+".effectfence_")
	// A one-statement write (spec.go) runs at the session's default isolation, which must be
	// READ COMMITTED (see Open). A pooler in transaction mode drops the setting the store sent
	// (and PgBouncer refuses to connect unless told to ignore it); a server whose default is
	// stricter is then refused here, before migrate creates anything (a refused open left the
	// schema's tables behind: TestTransactionPoolerStricterIsolationCreatesNothing), not found
	// out by failing writes.
	var iso string
	if err := conn.QueryRow(ctx, "SELECT current_setting('default_transaction_isolation')").Scan(&iso); err != nil {
		return err
	}
	if iso != "read committed" {
		return fmt.Errorf("the server session's default_transaction_isolation is %q, where the store sets read committed, which its one-statement writes need. "+
			"A pooler in transaction mode drops the setting a client sends (PgBouncer with default_transaction_isolation in ignore_startup_parameters): "+
			"set it for the role instead (ALTER ROLE … SET default_transaction_isolation = 'read committed'), or connect directly or through a pooler in session mode", iso)
	}
	if s.beside, err = migrate(ctx, conn.Conn(), schema, create, existing); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, foldCounters); err != nil {
		return fmt.Errorf("folding old counter shards: %w", err)
	}
	// The pin keeps pg_catalog where the session put it: named after the ledger's schema, the
	// schema's functions come before the built-in ones of their names (a clock_timestamp()
	// there is the clock every process of the ledger reads, as the clock tests make one);
	// not named, pg_catalog is searched first. Asked once the schema exists (migrate may
	// create it): current_schemas names only schemas that exist.
	var catalogAfter bool
	if err := conn.QueryRow(ctx, "SELECT coalesce(array_position(current_schemas(true), 'pg_catalog') > array_position(current_schemas(true), $1::name), false)", schema).Scan(&catalogAfter); err != nil {
		return err
	}
	s.pin = newSearchPin(schema, catalogAfter)
	s.path.pin.Store(&s.pin)
	s.pinned = " AND set_config('search_path', " + quoteLiteral(s.pin.set) + ", true) IS NOT NULL"
	// Where the ledger is, however its URL is written (SpoolKey). A server that does not
	// tell (pg_control_system revoked, or not PostgreSQL itself: it refuses the query, or
	// answers NULL) leaves it empty. Any other failure (the connection cut, the server
	// restarting) fails the open: until 2026-12-07 it too left the key empty, and the process
	// kept its outcomes in the spool named after its URL, where the host's other processes,
	// which use the ledger's, never look before taking over a dead holder's re-run-safe claim
	// (TestLostAnswerDuringFirstOpen: the answer of this query lost, Open succeeded without
	// the key).
	var sys, db, nsp *string
	err = conn.QueryRow(ctx, `SELECT (SELECT system_identifier::text FROM pg_control_system()),
		(SELECT oid::text FROM pg_database WHERE datname = current_database()),
		(SELECT oid::text FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&sys, &db, &nsp)
	var pe *pgconn.PgError
	switch {
	case err == nil && sys != nil && db != nil && nsp != nil:
		s.spoolKey = *sys + "/" + *db + "/" + *nsp
	case err == nil:
	case errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "42") || strings.HasPrefix(pe.Code, "0A")):
		// insufficient privilege, an undefined function, a feature not supported: the
		// server does not tell.
	default:
		return fmt.Errorf("reading where the ledger is (the name of this host's spool for it): %w", err)
	}
	s.warm(ctx)
	return nil
}

// foldCounters moves the totals of counter shards unused for an hour (processes gone, or idle:
// an idle one just starts a new shard) into one "folded" shard, so summing stays cheap however
// many processes came and went. One statement: nothing is counted twice or lost.
// countersAdd ends an INSERT into effectfence_counters (aliased c) by adding to the shard's
// row when it exists: Flush, the writes that carry counters and the hourly fold share it.
const countersAdd = `ON CONFLICT (shard) DO UPDATE SET updated_at = excluded.updated_at,
	admitted = c.admitted + excluded.admitted, reclaimed = c.reclaimed + excluded.reclaimed,
	replayed = c.replayed + excluded.replayed, coalesced = c.coalesced + excluded.coalesced,
	stale = c.stale + excluded.stale, race = c.race + excluded.race, in_flight = c.in_flight + excluded.in_flight,
	prior_failure = c.prior_failure + excluded.prior_failure, conflict = c.conflict + excluded.conflict,
	lease_lost = c.lease_lost + excluded.lease_lost`

// foldAge is how long a counter shard stays unused before foldCounters folds it.
const foldAge = time.Hour

const foldCounters = `WITH gone AS (
	DELETE FROM effectfence_counters WHERE shard <> 'folded' AND updated_at < now() - interval '1 hour' RETURNING *
)
INSERT INTO effectfence_counters AS c (shard, updated_at, admitted, reclaimed, replayed, coalesced, stale, race, in_flight, prior_failure, conflict, lease_lost)
SELECT 'folded', now(), sum(admitted), sum(reclaimed), sum(replayed), sum(coalesced), sum(stale), sum(race), sum(in_flight), sum(prior_failure), sum(conflict), sum(lease_lost)
FROM gone HAVING count(*) > 0
` + countersAdd

// warm opens the pool's minimum connections now, so that the first burst of calls does not
// wait for connection set-up.
func (s *Store) warm(ctx context.Context) {
	n := int(s.pool.Config().MinConns) - 1 // init holds one
	var wg sync.WaitGroup
	conns := make(chan *pgxpool.Conn, max(n, 0))
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := s.pool.Acquire(ctx); err == nil {
				conns <- c
			}
		}()
	}
	wg.Wait()
	close(conns)
	for c := range conns {
		c.Release()
	}
}

// ledgerFurtherOn refuses a session that resolves the ledger's schema from its search_path
// (none named in the URL's search_path parameter or in Config.Schema) to schema, which holds
// no ledger, while a schema after it on that path holds one. A schema made since the ledger
// was (a DBA's CREATE SCHEMA for the role, "$user", or one named first in options or for the
// role or the database) takes the unqualified names from then on: the store made an empty
// ledger there, and every call recorded in the other ran again on its next duplicate.
func ledgerFurtherOn(ctx context.Context, conn *pgxpool.Conn, schema, sp string) error {
	var found string
	err := conn.QueryRow(ctx, `SELECT n FROM unnest(current_schemas(false)) WITH ORDINALITY AS p(n, i)
		WHERE to_regclass(format('%I.effectfence_version', n)) IS NOT NULL ORDER BY i LIMIT 1`).Scan(&found)
	switch {
	case err == pgx.ErrNoRows:
		return nil
	case err != nil:
		return err
	case found == schema:
		return nil
	}
	return fmt.Errorf("the session's search_path (%s) reaches schema %q first, which holds no ledger, while %q after it holds one: "+
		"opened, the store would start an empty ledger in %q and every call recorded in %q would run again. "+
		"Name the ledger's schema in the URL (search_path=%s), or drop the empty schema %q; nothing was created",
		sp, schema, found, schema, found, pgx.Identifier{found}.Sanitize(), schema)
}

// pathPin keeps the search_path of every pooled connection on the ledger's schema alone, once
// init has resolved it. The store names its tables unqualified, and a session resolves them
// through its search_path, which the server reads again for each new session (the role's or
// the database's setting) and, for "$user" or a schema that did not exist, in an open session
// as soon as a schema of that name is made. A store whose URL names no schema (or names
// others after it) met, while it ran, a schema holding another ledger put ahead of its own:
// by ALTER ROLE … SET search_path, reaching its connections opened after that, or made with
// the role's name under "$user", reaching its open ones at once. It read and wrote that
// ledger from then on: a committed call looked absent and was admitted again
// (TestPathChangedUnderARunningStoreKeepsItsLedger). A connection opened once init has
// resolved the schema is pinned by the statement every new connection runs (afterConnect),
// at no round trip of its own; one opened before (init's, and those the pool opens at once
// beside it) is pinned before its first use after init (prepare). Until 2026-12-07 every
// connection was pinned at its first use, two round trips more for each (the statement
// prepared, then run: TestANewConnectionIsPinnedInItsSetUp). A session whose path is the
// schema alone already (the URL's or the role's setting) is left as it is, so that
// behind a pooler in transaction mode the store changes no server connection's path that
// others of the role may share. There a session is any of the pooler's server connections,
// most of which the pin never reached, and those opened after a role's search_path changed
// take the new one: the first statement of every transaction also sets the path for the
// transaction (Store.pinned), and a statement run alone names its tables with the schema
// (Store.qual). Before 2026-12-07, through PgBouncer in transaction mode, a committed call
// was admitted again once the role's path put another ledger ahead and the pooler
// reconnected (TestTransactionPoolerPathChangedKeepsItsLedger).
type pathPin struct {
	pin    atomic.Pointer[searchPin] // the path of the ledger's schema (nil until init resolves it)
	pinned sync.Map                  // *pgx.Conn → struct{}: connections pinned
}

// durableSession turns a session's synchronous_commit back on where it is off or local (see
// Open).
const durableSession = "SELECT set_config('synchronous_commit', 'on', false) WHERE current_setting('synchronous_commit') IN ('off', 'local')"

// afterConnect sets up a new connection (pgxpool's AfterConnect) in one statement, one round
// trip: durable (durableSession) and, once init has resolved the schema, pinned. Sent
// without parameters, it goes as a simple query, which no query mode prepares first.
func (p *pathPin) afterConnect(ctx context.Context, conn *pgx.Conn) error {
	pin := p.pin.Load()
	if pin == nil {
		_, err := conn.Exec(ctx, durableSession)
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT ("+durableSession+"), ("+pin.statement+")"); err != nil {
		return err
	}
	p.pinned.Store(conn, struct{}{})
	return nil
}

// prepare pins conn before it is handed out (pgxpool's PrepareConn) if it was opened before
// init resolved the schema.
func (p *pathPin) prepare(ctx context.Context, conn *pgx.Conn) (bool, error) {
	pin := p.pin.Load()
	if pin == nil {
		return true, nil
	}
	if _, ok := p.pinned.Load(conn); ok {
		return true, nil
	}
	if err := pinPath(ctx, conn, *pin); err != nil {
		if conn.IsClosed() {
			return false, nil // the pool drops it and tries another
		}
		return false, err
	}
	p.pinned.Store(conn, struct{}{})
	return true, nil
}

// forget drops conn, being closed, from the pinned connections (pgxpool's BeforeClose).
func (p *pathPin) forget(conn *pgx.Conn) { p.pinned.Delete(conn) }

// searchPin is the search_path a running store keeps its sessions on: the ledger's schema,
// followed by pg_catalog where the session the store opened with named it after the schema.
// set is the setting as the store writes it (the schema quoted); bare is the same with a
// schema name that needs no quotes written bare, as a URL or a role's setting has it.
// statement sets a session's path to set unless it is set or bare already.
type searchPin struct{ set, bare, statement string }

func newSearchPin(schema string, catalogAfter bool) searchPin {
	p := searchPin{set: pgx.Identifier{schema}.Sanitize(), bare: schema}
	if !plainIdentifier(schema) {
		p.bare = p.set
	}
	if catalogAfter {
		p.set += ", pg_catalog"
		p.bare += ", pg_catalog"
	}
	p.statement = "SELECT set_config('search_path', " + quoteLiteral(p.set) + ", false) WHERE current_setting('search_path') NOT IN (" +
		quoteLiteral(p.set) + ", " + quoteLiteral(p.bare) + ")"
	return p
}

// pinPath sets the session's search_path to pin unless it is that already, written either
// way: one round trip.
func pinPath(ctx context.Context, conn *pgx.Conn, pin searchPin) error {
	if _, err := conn.Exec(ctx, pin.statement); err != nil {
		return fmt.Errorf("postgres ledger: setting the connection's search_path to the ledger's schema (%s): %w", pin.set, err)
	}
	return nil
}

// plainIdentifier says whether name reads the same unquoted: lower-case ASCII letters, digits,
// underscores and dollar signs, not starting with a digit or a dollar sign. (A keyword reads
// the same in a search_path setting, which is not parsed as SQL.)
func plainIdentifier(name string) bool {
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r == '_':
		case (r >= '0' && r <= '9') || r == '$':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return name != ""
}

// firstPathElement returns the first element of a search_path setting as written: a quoted
// identifier (commas inside quotes do not split) or an unquoted name, trimmed.
func firstPathElement(sp string) string {
	sp = strings.TrimSpace(sp)
	quoted := false
	for i, r := range sp {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			return strings.TrimSpace(sp[:i])
		}
	}
	return sp
}

// Schema returns the schema that holds the ledger (its name as PostgreSQL resolved it).
func (s *Store) Schema() string { return s.schema }

// CreatedBeside names the schemas of the database that held an effectfence ledger when Open
// created this one, empty (its schema was missing or held no ledger), or found it there unused
// (no claim was ever made in it: an earlier Open made it, perhaps one whose COMMIT landed with
// its answer lost, so that its own warning was never given); nil when Open found a ledger that
// has been used, or created the first of the database. Open creates the ledger it is named,
// which is how a fleet's first process makes it, and how a new tenant's or environment's
// ledger is made beside others; it is also what a restart does after the ledger's schema was
// renamed, or the URL or the role's search_path changed: an empty ledger, where every call
// the other recorded runs again. Which of these it was, the store cannot tell; the opener
// (pkg/store) says so on its log, naming these schemas.
func (s *Store) CreatedBeside() []string { return s.beside }

// SpoolKey names the ledger by where it is: the server's system identifier, the database's
// and the schema's oids; "" when the server does not say. Every URL that reaches the ledger
// (another spelling, host name, parameter order, a pooler in front) gives the same key, so
// every process of a host keeps its outcomes in one spool and sees the others' (a dead
// holder's re-run-safe claim is not taken over while its outcome waits there).
func (s *Store) SpoolKey() string { return s.spoolKey }

// pingBound bounds pgxpool's ping of a connection idle for more than a second, sent before the
// connection is handed out: one that has not answered by then is closed and the next is
// tried. A connection that no longer answers though its network carries its bytes (a proxy in
// front of a server that failed over keeps the clients' old connections; a server's backend
// stopped) held the ping until the caller's deadline: a lease renewal's try spent it on one
// idle connection, and whether wrap's later tries (about seven before the lease lapses) met a
// working one depended on the pool destroying the others by chance: with a 20 s lease and
// the pool's eight warm connections frozen, the lease lapsed under a running holder in some
// runs (TestRenewalPassesFrozenIdleConnections). A second per connection lets the first try
// under the default lease (13 s) pass 13, and the second (9 s) the rest of the pool's 16. A
// server that takes longer to answer an empty query costs a new connection, no more. A URL's
// pool_ping_timeout is kept.
const pingBound = time.Second

// closeSettling bounds how long Close keeps trying to settle lost commits' counters.
const closeSettling = 3 * time.Second

// poolCloseWait bounds how long Close waits for the pool's connections to close. A
// connection whose query was cancelled is closed by pgx after a cancel request to the server,
// which waits up to 15 s when the server does not answer (a frozen database, a black-holed
// network): a stopping process would wait that long for sockets it is about to drop anyway.
const poolCloseWait = 2 * time.Second

// Close stops the listener of Watch, if one was started, and closes the pool. Connections
// that have not closed within poolCloseWait (a server that does not answer) go on closing
// in the background: they send the server nothing but pgx's cancel request and goodbye, and
// a transaction left open on one is rolled back by the server when its socket goes (as when
// the process is killed).
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		// The counters of commits whose answer was lost are added here if they did not land.
		// A claim's doubt cannot be judged until the server's clock is past it (specSlack),
		// so one try could leave it open and its counters lost: tries for a few seconds, and
		// no longer (a server that does not answer held each try for doubtTry).
		ctx, cancel := context.WithTimeout(context.Background(), closeSettling)
		defer cancel()
		for s.doubts.n.Load() > 0 {
			s.settleDoubts(ctx, true)
			if s.doubts.n.Load() == 0 || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		s.listenOnce.Do(func() {}) // no listener starts after Close
		if s.listener != nil {
			s.listener.close()
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			s.pool.Close()
		}()
		t := time.NewTimer(poolCloseWait)
		defer t.Stop()
		select {
		case <-closed:
		case <-t.C:
		}
	})
	return nil
}

// CommitUnknownError: the connection died after COMMIT was sent and the server could not be
// asked whether the transaction committed. The decision may or may not be recorded: call
// Status (or retry the same call) once the database is reachable again.
type CommitUnknownError struct {
	Xid int64
	Err error

	delta fence.Counters // the counters the transaction carried
	kept  bool           // the store settles them (doubt.go)
	claim bool           // a one-statement claim's (spec.go), not a commit's
	shard string         // the transaction's receipt (see resolve)
	// reports are the outcomes the transaction wrote (see EarlierAttempt).
	reports []report
}

// CountersKept (fence.CountersKept): the store adds the counters the commit carried if it
// learns the commit did not land.
func (e CommitUnknownError) CountersKept() bool { return e.kept }

func (e CommitUnknownError) Error() string {
	if errors.Is(e.Err, errUnconfirmed) {
		if e.claim {
			return fmt.Sprintf("postgres ledger: the claim was recorded on the server, but its wait for the synchronous standby was ended before the standby had it (a backend terminated, a wait cancelled), and the store could not confirm since that the standby has it: a failover may lose it. The call was not admitted and must not run; this process releases the claim once the database answers (a retry then runs the call) (%v)", e.Err)
		}
		return fmt.Sprintf("postgres ledger: the decision was recorded on the server, but its wait for the synchronous standby was ended before the standby had it (a backend terminated, a wait cancelled), and the store could not confirm since that the standby has it: a failover may lose it. Check the intent's status once the database is reachable (%v)", e.Err)
	}
	if e.claim {
		return fmt.Sprintf("postgres ledger: the connection was lost after a one-statement claim was sent, and the server could not be asked whether it was recorded; the call was not admitted and must not run; if the claim was recorded, this process releases it once the database answers and its next write there has settled that (a retry then runs the call) (%v)", e.Err)
	}
	if e.Xid == 0 {
		return fmt.Sprintf("postgres ledger: the connection was lost after a one-statement commit was sent, and the transaction that would have settled it failed too; the decision may or may not be recorded: check the intent's status once the database is reachable (%v)", e.Err)
	}
	return fmt.Sprintf("postgres ledger: the connection was lost after COMMIT of transaction %d was sent and the server could not be asked whether it committed; the decision may or may not be recorded: check the intent's status once the database is reachable (%v)", e.Xid, e.Err)
}

func (e CommitUnknownError) Unwrap() error { return e.Err }

// ConnLostError: the connection died before the transaction could commit; nothing of it was
// recorded. The next call uses a new connection.
type ConnLostError struct {
	Stage string
	Err   error
	// Read: the transaction was a read (a View): it wrote nothing, and what it read stopped
	// where the connection was lost.
	Read bool
}

func (e ConnLostError) Error() string {
	if e.Read {
		return fmt.Sprintf("postgres ledger: connection lost during %s of a read; it changed nothing, and what it read stopped there: %v", e.Stage, e.Err)
	}
	return fmt.Sprintf("postgres ledger: connection lost during %s; the transaction did not commit and nothing of it was recorded: %v", e.Stage, e.Err)
}

func (e ConnLostError) Unwrap() error { return e.Err }

// Update runs fn in one READ COMMITTED transaction under the locks described in the package
// comment, and commits. fn runs again (in a new transaction) when a compare-and-swap lost, on
// a deadlock, or on a serialization failure, up to 64 times. A commit of a claim this store
// wrote is first tried as one statement (see spec.go); fn then runs again in a transaction if
// the claim changed meanwhile.
func (s *Store) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if s.doubts.n.Load() > 0 {
		s.settleDoubts(ctx, false)
	}
	if !s.noSpeculation.Load() && (s.claims.n.Load() > 0 || (!s.noFreshSpeculation.Load() && s.clock.Load() != nil)) {
		if done, err := s.speculate(ctx, fn); done {
			return err
		}
	}
	return s.keep(s.transact(ctx, fn, nil), doubt{})
}

// transact is Update's transaction path. landed, when set, is a one-statement
// commit whose answer was lost (see speculate).
func (s *Store) transact(ctx context.Context, fn func(fence.Tx) error, landed *lostStmt) error {
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		err = s.run(ctx, attempt > 0, true, landed, fn)
		if !retryable(err) {
			return err
		}
		if werr := backoff(ctx, attempt); werr != nil {
			return werr
		}
	}
	return fmt.Errorf("postgres ledger: gave up after %d attempts under contention: %w", maxAttempts, err)
}

// WriteFirst (fence.WriteFirst): the engine skips its read-only pass here. An Update that only
// reads (a replay, a refusal) costs what a View costs, a round trip to read and one to end the
// transaction, and writes no WAL that must be flushed; an attempt that must write saves the
// View's two round trips.
func (s *Store) WriteFirst() bool { return true }

// View runs fn in a REPEATABLE READ, READ ONLY transaction: one snapshot for all its reads.
func (s *Store) View(ctx context.Context, fn func(fence.Tx) error) error {
	return s.run(ctx, false, false, nil, fn)
}

func retryable(err error) bool {
	if err == nil {
		return false // without reaching errors.As, whose target escapes: an allocation per call
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}

// backoff sleeps a random time below min(1 ms << attempt, 20 ms).
func backoff(ctx context.Context, attempt int) error {
	ceil := time.Millisecond << min(attempt, 5)
	ceil = min(ceil, 20*time.Millisecond)
	n, _ := rand.Int(rand.Reader, big.NewInt(int64(ceil)))
	t := time.NewTimer(time.Duration(n.Int64()))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is one transaction. A connection found dead by the transaction's first round trip is
// replaced: nothing had been executed on it. After a server restart every idle connection in
// the pool is dead, as many as the pool holds; the pool discards each dead one it hands out,
// so the store tries once more than the pool's size before it gives up (three tries, as
// before, left the first calls after a restart failing with a store_error).
func (s *Store) run(ctx context.Context, contended, write bool, landed *lostStmt, fn func(fence.Tx) error) error {
	for try := 1; ; try++ {
		err := s.runOnce(ctx, contended, write, landed, fn)
		var lost ConnLostError
		if errors.As(err, &lost) && lost.Stage == "begin" && ctx.Err() == nil && try <= int(s.pool.Stat().MaxConns()) {
			continue
		}
		return s.explained(ctx, err)
	}
}

// explained gives the server's refusals that end a transaction before its COMMIT the text
// that names their cause and says that nothing of it was recorded. A CommitUnknownError is
// left as it is: its COMMIT was sent and may have landed, and the refusal it carries is that
// of the statement asking about it (a statement_timeout, say), not of the transaction.
func (s *Store) explained(ctx context.Context, err error) error {
	var unknown CommitUnknownError
	if err == nil || errors.As(err, &unknown) {
		return err
	}
	if ctx.Err() == nil {
		err = statementTimedOut(err)
	}
	return s.refusedMidRun(lockTimedOut(err))
}

// refusedMidRun explains the server's refusals of a ledger that Open had found writable and
// whole, which an operator or a failover tool changed while this process ran: the session
// turned read-only (default_transaction_read_only set for the role, the database or the
// server, as a failover tool does to fence off an old primary, reaching the store's new
// connections), a privilege on the ledger's tables revoked, the schema or its tables dropped
// or renamed. Each ends a statement before COMMIT, which then is not run: nothing of the
// transaction was recorded. The server's text alone ("cannot execute nextval() in a read-only
// transaction", "relation "effectfence_records" does not exist") named neither the cause
// nor that (TestSessionChangedUnderARunningStoreIsExplained).
func (s *Store) refusedMidRun(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Severity == "FATAL" {
		// FATAL: a refused connect (CONNECT on the database revoked, say), whose text names
		// its cause.
		return err
	}
	schema := pgx.Identifier{s.schema}.Sanitize()
	switch pe.Code {
	case "25006": // read_only_sql_transaction
		return fmt.Errorf("postgres ledger: %w: the session turned read-only while this process ran (default_transaction_read_only set for the role, the database or the server, as a failover tool does to fence off an old primary; or the server is now a standby); nothing of this transaction was recorded. "+
			"The store does not turn the setting off: point the URL at the server that takes writes (with several hosts, target_session_attrs=read-write): %w", ErrReadOnly, err)
	case "42501": // insufficient_privilege
		return fmt.Errorf("postgres ledger: the ledger's role may no longer use the ledger in schema %s (a privilege was revoked while this process ran); nothing of this transaction was recorded. "+
			"Grant the role USAGE on the schema and SELECT, INSERT, UPDATE and DELETE on its tables and USAGE on its sequences again: %w", schema, err)
	case "42P01", "3F000": // undefined_table, invalid_schema_name
		return fmt.Errorf("postgres ledger: the ledger's tables are gone from schema %s (dropped or renamed while this process ran); nothing of this transaction was recorded. "+
			"If it was renamed, name the new schema in the URL (search_path) and restart; a process that opens the old name creates an empty ledger there, in which every recorded call runs again: %w", schema, err)
	}
	return err
}

// statementTimedOut explains an error of the session's statement_timeout, which the store
// never sets: a role, a database or the URL did. Its usual cause is the same as lock_timeout's
// (a wait for an intent's lock while another attempt of it is decided for longer), and what
// it ends is never the commit itself (PostgreSQL writes a commit without taking a cancel), so
// nothing of the transaction was recorded. The server's text alone ("canceling statement due
// to statement timeout") read as a failure of the server and named neither
// (TestStatementTimeoutOfTheSessionIsExplained). Only the server's English text tells it from
// a cancel sent by hand (pg_cancel_backend), which has the same code (query_canceled); the
// caller's own cancel is not this (ctx.Err is checked first).
func statementTimedOut(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "57014" || !strings.Contains(pe.Message, "statement timeout") {
		return err
	}
	return fmt.Errorf("postgres ledger: the session's statement_timeout (set for the role, the database or in the URL) cancelled a statement of the ledger's transaction, most likely a wait for a lock another attempt of the same intent held while it was decided; nothing of this transaction was recorded, and a retry may succeed (to wait as long as the caller does, set statement_timeout to 0 for the ledger's role): %w", err)
}

// lockTimedOut explains an error of the session's lock_timeout (lock_not_available), which
// the store never sets for its transactions: a role, a database or the URL did. The store's
// transactions wait only for each other (an intent's lock while another attempt of it is
// decided, a domain's row), and before COMMIT: nothing of the transaction was recorded. The
// server's text alone ("canceling statement due to lock timeout") read as a failure of the
// server and named neither (TestLockTimeoutOfTheSessionIsExplained).
func lockTimedOut(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "55P03" {
		return err
	}
	return fmt.Errorf("postgres ledger: the session's lock_timeout (set for the role, the database or in the URL) ended a wait for a lock another transaction of the ledger held, most likely another attempt of the same intent being decided; nothing of this transaction was recorded, and a retry may succeed (to wait as long as the caller does, set lock_timeout to 0 for the ledger's role): %w", err)
}

func (s *Store) runOnce(ctx context.Context, contended, write bool, landed *lostStmt, fn func(fence.Tx) error) (err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres ledger: no connection: %w", err)
	}
	defer pc.Release()
	conn := pc.Conn()
	t := &tx{s: s, ctx: ctx, conn: conn, write: write, contended: contended, pid: conn.PgConn().PID(), landed: landed}
	// BEGIN and the clock travel with the transaction's first read (or with Now, if it is
	// asked first), saving a round trip.
	if write {
		// The clock and the transaction id are read by the statement that follows BEGIN:
		// the first intent lock when the transaction starts with one (see tx.lock), else
		// start.
		t.pending.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
		t.unstarted = true
	} else {
		t.pending.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
		t.pending.Queue("SELECT clock_timestamp() WHERE " + readable + s.pinned).QueryRow(func(r pgx.Row) error { return r.Scan(&t.now) })
	}

	defer func() {
		if retryable(err) {
			now := time.Now()
			for d := range t.swapped {
				s.hot.Store(d, now)
			}
		}
	}()
	stage := func() string {
		if !t.begun {
			return "begin"
		}
		return "the transaction"
	}
	if err := fn(t); err != nil {
		if conn.IsClosed() {
			return s.fail(ctx, conn, write, stage(), err)
		}
		if t.begun || t.err != nil {
			s.rollback(conn)
		}
		return err
	}
	if t.err != nil { // a read failed but fn ignored it
		return s.fail(ctx, conn, write, stage(), t.err)
	}
	if !write {
		if !t.begun {
			return nil // fn read nothing: nothing was sent
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			return s.fail(ctx, conn, write, "the end", err)
		}
		return nil
	}
	if !t.begun {
		// Learn the transaction id before COMMIT is sent, so a lost acknowledgement can be
		// resolved.
		if err := t.send(nil); err != nil {
			return s.fail(ctx, conn, write, stage(), err)
		}
	}
	if !t.receipt {
		// A receipt (see resolve), for a transaction that carried no counters: one more
		// statement in the same round trip.
		args, _ := counterArgs(s.shard(conn.PgConn()), fence.Counters{})
		t.pending.Queue(addCounters, args...)
	}
	s.at("commit", t.pid)
	t.pending.Queue("COMMIT")
	s.warns.reset(conn.PgConn())
	err = conn.SendBatch(ctx, &t.pending).Close()
	if err == nil {
		c := connCounted(conn.PgConn())
		*c = c.Add(t.delta)
	}
	if warned := s.warns.warned(conn.PgConn()); err == nil && warned {
		// Its wait for a synchronous standby may have been cancelled (standby.go).
		if cerr := s.confirm(ctx); cerr != nil {
			return CommitUnknownError{Xid: t.xid, Err: cerr, shard: s.shard(conn.PgConn()), delta: t.delta, reports: t.reports}
		}
	}
	if err == nil {
		s.at("committed", t.pid)
		t.learn()
		return nil
	}
	if !conn.IsClosed() {
		s.rollback(conn)
		return err
	}
	err = s.resolve(ctx, t.xid, s.shard(conn.PgConn()), err)
	if cu, ok := err.(CommitUnknownError); ok {
		cu.delta, cu.reports = t.delta, t.reports
		return cu
	}
	if err == nil {
		t.learn()
	}
	return err
}

// fail closes out a transaction that failed before COMMIT was sent.
func (s *Store) fail(ctx context.Context, conn *pgx.Conn, write bool, stage string, err error) error {
	if conn.IsClosed() {
		if ctx.Err() != nil {
			return fmt.Errorf("postgres ledger: %s cancelled; nothing of it was recorded: %w", stage, ctx.Err())
		}
		return ConnLostError{Stage: stage, Err: err, Read: !write}
	}
	s.rollback(conn)
	return err
}

// rollback ends a failed transaction. If even that fails, the connection is closed so the
// pool does not hand it out in an unknown state.
func (s *Store) rollback(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = conn.Close(ctx)
	}
}

// resolve learns whether a transaction whose COMMIT acknowledgement was lost committed, by
// asking the server on another connection. A terminated backend may take a moment to finish
// aborting, so "in progress" is asked again for up to 5 s. shard is the counters row the
// transaction wrote (its receipt).
//
// txid_status alone cannot say "committed" for sure: a transaction whose WAL the server lost
// (killed before its COMMIT was flushed; a standby promoted without it) leaves its id unused,
// and the server, back, gives that id to the next transaction, whose fate txid_status then
// reports. So every write transaction writes its connection's counters row (a receipt: the
// row's version is then the transaction's, its xmin the transaction's id), and committed is
// believed only where that row says so. No other transaction writes that row (it is the
// connection's own, and the connection died with the lost answer), so a row that another
// transaction id wrote last, or no row, means this transaction was lost.
func (s *Store) resolve(ctx context.Context, xid int64, shard string, cause error) error {
	if ctx.Err() != nil {
		// The caller gave up; ask anyway, briefly: the answer decides what we report.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	dead := 0
	for {
		status, writer, closed, err := s.askResolve(ctx, xid, shard)
		if closed && dead <= int(s.pool.Stat().MaxConns()) && ctx.Err() == nil {
			// A pooled connection that died with the others (the lost answer's cause may
			// have been the server's restart or a failover): ask on the next, as settleClaim.
			dead++
			continue
		}
		switch {
		case err != nil:
			return CommitUnknownError{Xid: xid, Err: errors.Join(cause, err), shard: shard}
		case status == nil:
			return CommitUnknownError{Xid: xid, Err: cause, shard: shard}
		case *status == "committed" && receiptIs(writer, xid):
			// Committed on this server; its wait for a synchronous standby may have been
			// ended with the connection (standby.go).
			if err := s.confirm(ctx); err != nil {
				return CommitUnknownError{Xid: xid, Err: errors.Join(cause, err), shard: shard}
			}
			s.at("resolved committed", 0)
			return nil
		case *status == "committed":
			s.at("resolved reused", 0)
			return ConnLostError{Stage: "commit", Err: fmt.Errorf("%w (the server lost the transaction: its id %d names another transaction now)", cause, xid)}
		case *status == "aborted":
			s.at("resolved aborted", 0)
			return ConnLostError{Stage: "commit", Err: cause}
		}
		if time.Now().After(deadline) {
			return CommitUnknownError{Xid: xid, Err: cause, shard: shard}
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return CommitUnknownError{Xid: xid, Err: errors.Join(cause, ctx.Err()), shard: shard}
		}
	}
}

// askResolve asks resolveQuery on one pooled connection; closed says the connection died.
func (s *Store) askResolve(ctx context.Context, xid int64, shard string) (status *string, writer *int64, closed bool, err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	defer pc.Release()
	err = pc.Conn().QueryRow(ctx, s.qual.Replace(resolveQuery), xid, shard).Scan(&status, &writer)
	return status, writer, err != nil && pc.Conn().IsClosed(), err
}

// resolveQuery asks the fate of transaction $1 and which transaction last wrote the counters
// row $2 (its receipt): xmin holds the low 32 bits of a transaction id.
const resolveQuery = `SELECT txid_status($1), (SELECT xmin::text::bigint FROM effectfence_counters WHERE shard = $2)`

// receiptIs says whether writer, the xmin of a transaction's receipt row (nil: no row), is
// the transaction xid.
func receiptIs(writer *int64, xid int64) bool {
	return writer != nil && *writer == xid&0xffffffff
}

// hotWindow is how long a domain that lost a swap is read with a row lock.
const hotWindow = 10 * time.Second

func (s *Store) isHot(domain string) bool {
	v, ok := s.hot.Load(domain)
	if !ok {
		return false
	}
	if time.Since(v.(time.Time)) > hotWindow {
		s.hot.Delete(domain)
		return false
	}
	return true
}

// shard names the counters row of this store's connection c: its backend's pid and cancel
// key, which together name one backend of one server run (a pid alone may come again). No
// other connection writes that row, so its version names the last transaction that wrote it
// (see resolve).
func (s *Store) shard(c *pgconn.PgConn) string {
	var key uint64
	for _, b := range c.SecretKey() {
		key = key<<8 | uint64(b) // 4 bytes (protocol 3.0), up to 256 (3.2): the low 8 kept
	}
	return s.instance + "/" + strconv.FormatUint(uint64(c.PID()), 10) + "." + strconv.FormatUint(key, 36)
}

func (s *Store) held(n int) {
	if s.rowsHeld != nil {
		s.rowsHeld(n)
	}
}

func (s *Store) at(stage string, pid uint32) {
	if s.hook != nil {
		s.hook(stage, pid)
	}
}

// lockKey is the advisory lock key of (schema, kind, name): the first 8 bytes of a SHA-256. A
// collision only makes two unrelated intents take turns.
func lockKey(schema, kind, name string) int64 {
	var buf [256]byte // the hashed bytes, on the stack when they fit
	b := append(append(append(append(append(buf[:0], schema...), 0), kind...), 0), name...)
	sum := sha256.Sum256(b)
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

// userInfo returns the user information of a connection URL as pgx reads it, like libpq:
// what stands before the first '@' that comes before any '/', even an '@' that url.Parse
// reads as part of the query ("postgres://h?x=u:secret@other/d" has the user information
// "h?x=u:secret"), and what follows it; ok is false when there is none.
func userInfo(raw string) (info, after string, ok bool) {
	_, rest, _ := strings.Cut(raw, "://")
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		return rest[:i], rest[i+1:], true
	}
	return "", rest, false
}

// secretParam reports whether a query parameter's name (as given, percent-decoded) is one
// pgx sends as a secret: password, or sslpassword (the client key's passphrase), in any letter
// case and with spaces around it.
func secretParam(name string) bool {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "password", "sslpassword":
		return true
	}
	return false
}

// Secret returns "password" or "sslpassword" when the connection URL raw holds one as pgx
// reads it (userInfo; a URL url.Parse refuses, such as one with a bad port, still reaches
// pgx's parser), else "".
func Secret(raw string) string {
	info, rest, _ := userInfo(raw)
	if strings.Contains(info, ":") {
		return "password"
	}
	_, query, _ := strings.Cut(rest, "?")
	for _, kv := range strings.Split(query, "&") {
		name, _, _ := strings.Cut(kv, "=")
		if d, err := url.PathUnescape(name); err == nil {
			name = d
		}
		if secretParam(name) {
			return strings.ToLower(strings.TrimSpace(name))
		}
	}
	return ""
}

// Redact returns a connection URL with its password replaced, for messages (they reach logs
// and, in a fenced call's answer, the agent). Secrets are found as pgx reads the URL (Secret).
// A URL whose user information or query url.Parse cannot read as pgx does is not shown.
func Redact(raw string) string {
	const unshown = "(unparsable postgres URL)"
	u, err := url.Parse(raw)
	if err != nil {
		return unshown
	}
	if info, _, _ := userInfo(raw); strings.Contains(info, ":") {
		if _, has := u.User.Password(); !has || u.User.String() != info {
			return unshown
		}
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return unshown
	}
	changed := false
	for k := range q {
		if secretParam(k) {
			q[k], changed = []string{"xxxxx"}, true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// SpoolName is the name the spool of the ledger at raw was filed under before Redact read
// URLs as pgx does (it is Redact as it was then), so that outcomes spooled by an earlier
// effectfence are found. A URL url.Parse refuses but pgx reads (a password with a '#' or a
// '?' in it, not percent-encoded) is named by its own text, its secrets left out as pgx reads
// them: before 2026-12-06 every such URL was "(unparsable postgres URL)", one spool for all
// their ledgers, and opening one drained the others' outcomes into it, which refused them
// and deleted their files (TestPostgresSpoolsOfUnparsableURLsAreNotShared).
func SpoolName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable postgres URL) " + withoutSecrets(raw)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// withoutSecrets is raw with its password (in the user information or a password or
// sslpassword parameter, found as pgx finds them: userInfo) written xxxxx, the rest as it is.
func withoutSecrets(raw string) string {
	scheme, _, _ := strings.Cut(raw, "://")
	info, rest, hasInfo := userInfo(raw)
	var b strings.Builder
	b.WriteString(scheme + "://")
	if hasInfo {
		if user, _, pw := strings.Cut(info, ":"); pw {
			info = user + ":xxxxx"
		}
		b.WriteString(info + "@")
	}
	path, query, hasQuery := strings.Cut(rest, "?")
	b.WriteString(path)
	if hasQuery {
		kvs := strings.Split(query, "&")
		for i, kv := range kvs {
			name, _, _ := strings.Cut(kv, "=")
			decoded := name
			if d, err := url.PathUnescape(name); err == nil {
				decoded = d
			}
			if secretParam(decoded) {
				kvs[i] = name + "=xxxxx"
			}
		}
		b.WriteString("?" + strings.Join(kvs, "&"))
	}
	return b.String()
}
