package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectfence/effectfence/pkg/fence"
)

// These tests run the ledger through a real PgBouncer in pool_mode = transaction, as managed
// services put it in front of PostgreSQL: each transaction may run on another server
// connection, and nothing a client sets on its session (startup parameters, a session
// set_config) is carried from one to the next. What reaches every pooled server connection
// is what the server applies when it opens one: the role's and the database's defaults.

// pgbouncerPath finds PgBouncer on PATH, else where Debian's package installs it; "" if neither.
func pgbouncerPath() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	const debian = "/usr/sbin/pgbouncer"
	if fi, err := os.Stat(debian); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return debian
	}
	return ""
}

// pgbouncerIgnores are the startup parameters PgBouncer must be told to ignore for pgx to
// connect: the store sends search_path and default_transaction_isolation (RuntimeParams), a
// URL may carry synchronous_commit, and other drivers send extra_float_digits. PgBouncer
// refuses a client that sends any other; those it ignores never reach the server.
const pgbouncerIgnores = "extra_float_digits,search_path,default_transaction_isolation,synchronous_commit"

// startPgBouncer runs a PgBouncer in pool_mode = transaction in front of the test server and
// returns its port on 127.0.0.1; it is stopped when the test ends. roles may connect (with no
// password: auth_type = trust), and postgres, for the admin console. Each role reaches the
// server as itself, so its own defaults (ALTER ROLE … SET) apply to its server connections.
// The pool is small (4 server connections per role), so server connections are shared by the
// clients and reused across their transactions.
func startPgBouncer(t *testing.T, roles ...string) int {
	t.Helper()
	server, err := pgconn.ParseConfig(testURL(t))
	if err != nil {
		t.Fatalf("%s: %v", EnvTestURL, err)
	}
	bin := pgbouncerPath()
	if bin == "" {
		t.Skip("SKIP-REQUIRED: pgbouncer is not installed (scripts/install-peers installs it)")
	}
	dir, err := os.MkdirTemp("", "effectfence-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // registered first, so it runs after the stop
	var users strings.Builder
	for _, r := range append([]string{"postgres"}, roles...) {
		fmt.Fprintf(&users, "%q \"\"\n", r)
	}
	authFile, logFile, iniFile := filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(authFile, []byte(users.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// A free port is only free until someone takes it: PgBouncer then exits at once, and the
	// next attempt takes another.
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		ini := fmt.Sprintf(`[databases]
%s = host=%s port=%d dbname=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = postgres
pool_mode = transaction
default_pool_size = 4
min_pool_size = 0
max_client_conn = 200
server_login_retry = 1
ignore_startup_parameters = %s
logfile = %s
`, server.Database, server.Host, server.Port, server.Database, port, authFile, pgbouncerIgnores, logFile)
		if err := os.WriteFile(iniFile, []byte(ini), 0o600); err != nil {
			t.Fatal(err)
		}
		stderr, err := os.Create(filepath.Join(dir, "stderr.txt"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, iniFile)
		cmd.Stdout, cmd.Stderr = stderr, stderr
		poolerUser(t, cmd, dir)
		if err := cmd.Start(); err != nil {
			stderr.Close()
			t.Fatalf("starting %s: %v", bin, err)
		}
		stderr.Close() // the child has its own copy
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		tail := func() string {
			return "log " + logFile + ":\n" + lastLines(logFile, 20) + "\nstderr:\n" + lastLines(filepath.Join(dir, "stderr.txt"), 10)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		deadline := time.Now().Add(10 * time.Second)
		for {
			select {
			case <-exited:
				if attempt < 3 && strings.Contains(tail(), "in use") {
					break // the port was taken meanwhile: another one
				}
				t.Fatalf("pgbouncer exited before accepting connections on %s (%v); %s", addr, waitErr, tail())
			default:
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					c.Close()
					t.Cleanup(stop)
					return port
				}
				if time.Now().After(deadline) {
					stop()
					t.Fatalf("pgbouncer did not accept connections on %s within 10s; %s", addr, tail())
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			break
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that nobody listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// lastLines returns the last n lines of a file, or why it could not be read.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// poolerRole creates a login role for one test, with synchronous_commit off by default, and a
// schema it owns. With searchPath the schema is <role>_l and the role's default search_path
// names it (a role's default is what reaches every server connection a pooler opens for it);
// without, the schema is named as the role, which the server's default search_path ("$user",
// public) reaches first. The role may create schemas in the database. Everything is dropped
// when the test ends, failed or not: the role's schemas with all they hold (the test's own
// tables in them too), what else it owns and the privileges it was granted, and the role.
func poolerRole(t *testing.T, searchPath bool) (role, schema string) {
	t.Helper()
	ctx := context.Background()
	role = newRole(t, "effectfence_pgb", "LOGIN")
	schema = role
	if searchPath {
		schema = role + "_l"
	}
	conn := admin(t, "")
	r, s := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize()
	server, err := pgconn.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	setup := []string{
		"ALTER ROLE " + r + " SET synchronous_commit = off",
		"CREATE SCHEMA " + s + " AUTHORIZATION " + r,
		// So that a refused Open (TestTransactionPoolerWithoutTheSchemaIsRefused) could
		// create the schema it is told: the refusal, not a missing privilege, must stop it.
		"GRANT CREATE ON DATABASE " + pgx.Identifier{server.Database}.Sanitize() + " TO " + r,
	}
	if searchPath {
		setup = append(setup, "ALTER ROLE "+r+" SET search_path = "+s)
	}
	for _, q := range setup {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return role, schema
}

// poolerURL is the URL of the test database through the PgBouncer on port, as role, with
// params (default_query_exec_mode, pool_max_conns, search_path …).
func poolerURL(t *testing.T, role string, port int, params map[string]string) string {
	t.Helper()
	server, err := pgconn.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"sslmode": {"disable"}}
	for k, v := range params {
		q.Set(k, v)
	}
	u := url.URL{Scheme: "postgres", User: url.User(role), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/" + server.Database, RawQuery: q.Encode()}
	return u.String()
}

// openPooled opens a store on url, closed when the test ends.
func openPooled(t *testing.T, u string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// reconnectPooler has the PgBouncer on port close every server connection once it is
// released (its admin console's RECONNECT), as it does when a connection reaches
// server_lifetime or the server fails over: the connections it opens next start from the
// role's defaults. The store's clients stay connected and see nothing of it.
func reconnectPooler(t *testing.T, port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", port)
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("pgbouncer's admin console: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "RECONNECT"); err != nil {
		t.Fatalf("pgbouncer's admin console: RECONNECT: %v", err)
	}
}

// TestTransactionPoolerKeepsReceiptsDurable: through PgBouncer in transaction mode, with the
// role defaulting synchronous_commit to off, every transaction that writes a claim or an
// outcome commits with synchronous_commit on (or stronger), on whichever server connection
// the pooler gives it. The store's per-connection setting (AfterConnect) reaches only the
// server connection it ran on, and not at all the ones the pooler opens later (here all of
// them: the test has PgBouncer reconnect its server connections once the stores are open).
//
// A trigger on effectfence_records witnesses each committed write: the session's
// synchronous_commit as the writing transaction sees it, and the server process. Two stores
// (one naming the schema in search_path, which the pooler drops, one relying on the role's
// default search_path alone) run 400 fresh calls, Prepare then Commit, from 16 goroutines.
// Both query modes PgBouncer 1.18 supports in transaction mode are run: simple_protocol, and
// exec (the extended protocol with unnamed statements only).
func TestTransactionPoolerKeepsReceiptsDurable(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"simple_protocol", "exec"} {
		t.Run(mode, func(t *testing.T) {
			role, schema := poolerRole(t, true)
			port := startPgBouncer(t, role)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			params := map[string]string{"default_query_exec_mode": mode, "pool_max_conns": "8"}
			sa := openPooled(t, poolerURL(t, role, port, params))
			params["search_path"] = schema
			sb := openPooled(t, poolerURL(t, role, port, params))
			if sa.schema != schema || sb.schema != schema {
				t.Fatalf("the stores opened schemas %q and %q, want %q (the role's default search_path)", sa.schema, sb.schema, schema)
			}

			q := pgx.Identifier{schema}.Sanitize()
			adm := admin(t, "")
			witness := `CREATE TABLE ` + q + `.pgb_witness (sync_commit text NOT NULL, pid integer NOT NULL, state text NOT NULL);
GRANT INSERT ON ` + q + `.pgb_witness TO ` + pgx.Identifier{role}.Sanitize() + `;
CREATE FUNCTION ` + q + `.pgb_witness() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ` + q + `.pgb_witness (sync_commit, pid, state) VALUES (current_setting('synchronous_commit'), pg_backend_pid(), NEW.state);
	RETURN NULL;
END
$$;
CREATE TRIGGER pgb_witness AFTER INSERT OR UPDATE ON ` + q + `.effectfence_records FOR EACH ROW EXECUTE FUNCTION ` + q + `.pgb_witness();`
			if _, err := adm.Exec(ctx, witness); err != nil {
				t.Fatal(err)
			}

			reconnectPooler(t, port)
			// The premise: a server connection the pooler opens for the role has its default.
			probe, err := pgx.Connect(ctx, poolerURL(t, role, port, map[string]string{"default_query_exec_mode": "simple_protocol"}))
			if err != nil {
				t.Fatal(err)
			}
			var probed string
			err = probe.QueryRow(ctx, "SHOW synchronous_commit").Scan(&probed)
			probe.Close(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if probed != "off" {
				t.Fatalf("setup: a plain connection through the pooler has synchronous_commit=%s, not the role's default off; this run would prove nothing", probed)
			}

			engines := []*fence.Engine{fence.New(sa, fence.Config{Owner: "host-a/1/1"}), fence.New(sb, fence.Config{Owner: "host-b/1/1"})}
			const workers, perWorker = 16, 25
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e := engines[w%len(engines)]
					for k := range perWorker {
						intent := fmt.Sprintf("durable:%d:%d", w, k)
						a, err := e.Prepare(ctx, fence.Request{Intent: intent, Tool: "pgb", Args: []byte(`{"k":1}`)})
						if err != nil {
							t.Errorf("Prepare %s through the pooler: %v", intent, err)
							return
						}
						if !a.Fresh() {
							t.Errorf("Prepare %s, a fresh intent, was answered with a replay", intent)
							return
						}
						if _, err := e.Commit(ctx, *a.Ticket, []byte(`{"ok":true}`)); err != nil {
							t.Errorf("Commit %s through the pooler: %v", intent, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}

			const calls = workers * perWorker
			var total, claims, dones, pids int
			err = adm.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'in_flight'), count(*) FILTER (WHERE state = 'done'), count(DISTINCT pid) FROM `+q+`.pgb_witness`).Scan(&total, &claims, &dones, &pids)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: the witness saw %d committed writes (%d claims, %d outcomes) on %d server processes", mode, total, claims, dones, pids)
			if claims < calls || dones < calls {
				t.Fatalf("the witness saw %d claims and %d outcomes committed, want at least %d of each: it did not see every write", claims, dones, calls)
			}
			if pids < 2 {
				t.Fatalf("the witness saw every write on %d server process(es): the pooler did not spread the transactions over server connections, so this run proves nothing", pids)
			}
			rows, err := adm.Query(ctx, `SELECT pid, sync_commit, count(*) FROM `+q+`.pgb_witness
				WHERE sync_commit NOT IN ('on', 'remote_apply', 'remote_write', 'local') GROUP BY 1, 2 ORDER BY 1, 2`)
			if err != nil {
				t.Fatal(err)
			}
			var bad []string
			weak := 0
			for rows.Next() {
				var pid, n int
				var sc string
				if err := rows.Scan(&pid, &sc, &n); err != nil {
					t.Fatal(err)
				}
				weak += n
				bad = append(bad, fmt.Sprintf("pid %d: %d writes with synchronous_commit=%s", pid, n, sc))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if weak > 0 {
				t.Errorf("%d of %d ledger writes committed with synchronous_commit weaker than on (the role's default reached their server connections through the pooler, and a crash could lose those receipts):\n%s", weak, total, strings.Join(bad, "\n"))
			}
		})
	}
}

// TestTransactionPoolerAdmitsOnce: through PgBouncer in transaction mode, where an intent's
// lock and record are read on whatever server connection each transaction gets, the fence
// still admits each intent exactly once. Two engines on two stores (one in simple_protocol,
// one in exec mode) race 16 goroutines each on the same 50 fresh intents, in 4 rounds; every
// admission is committed at once. Every other attempt must be a replay of the one recorded
// result or a refusal while it is in flight, nothing else; afterwards the ledger holds one done
// record per intent.
func TestTransactionPoolerAdmitsOnce(t *testing.T) {
	t.Parallel()
	role, schema := poolerRole(t, true)
	port := startPgBouncer(t, role)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sa := openPooled(t, poolerURL(t, role, port, map[string]string{"default_query_exec_mode": "simple_protocol", "pool_max_conns": "8"}))
	sb := openPooled(t, poolerURL(t, role, port, map[string]string{"default_query_exec_mode": "exec", "pool_max_conns": "8", "search_path": schema}))
	if sa.schema != schema || sb.schema != schema {
		t.Fatalf("the stores opened schemas %q and %q, want %q (the role's default search_path)", sa.schema, sb.schema, schema)
	}
	engines := []*fence.Engine{fence.New(sa, fence.Config{Owner: "host-a/1/1"}), fence.New(sb, fence.Config{Owner: "host-b/1/1"})}

	const rounds, intents, perEngine = 4, 50, 16
	type tally struct {
		admitted int
		result   []byte   // what the admitted attempt committed
		replays  [][]byte // the results replays were given
		inFlight int
	}
	for round := range rounds {
		var mu sync.Mutex
		tallies := make(map[string]*tally, intents)
		names := make([]string, intents)
		for i := range names {
			names[i] = fmt.Sprintf("once:%d:%d", round, i)
			tallies[names[i]] = &tally{}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for ei, e := range engines {
			for g := range perEngine {
				wg.Add(1)
				go func() {
					defer wg.Done()
					order := append([]string(nil), names...)
					rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
					<-start
					for _, intent := range order {
						a, err := e.Prepare(ctx, fence.Request{Intent: intent, Tool: "pgb", Args: []byte(`{"k":1}`)})
						switch {
						case errors.Is(err, fence.ErrInFlight):
							mu.Lock()
							tallies[intent].inFlight++
							mu.Unlock()
						case err != nil:
							t.Errorf("Prepare %s through the pooler: %v", intent, err)
						case a.Fresh():
							result := fmt.Appendf(nil, `{"by":"%d/%d"}`, ei, g)
							mu.Lock()
							tallies[intent].admitted++
							mu.Unlock()
							if _, err := e.Commit(ctx, *a.Ticket, result); err != nil {
								t.Errorf("Commit %s through the pooler: %v", intent, err)
								continue
							}
							mu.Lock()
							tallies[intent].result = result
							mu.Unlock()
						case a.Cert == nil:
							t.Errorf("Prepare %s: an admission with neither a ticket nor a cert", intent)
						case a.Cert.Intent != intent:
							t.Errorf("Prepare %s was given the cert of %s", intent, a.Cert.Intent)
						default:
							mu.Lock()
							tallies[intent].replays = append(tallies[intent].replays, a.Cert.Result)
							mu.Unlock()
						}
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		replayed, refused := 0, 0
		for _, name := range names {
			c := tallies[name]
			if c.admitted != 1 {
				t.Errorf("round %d: intent %s was admitted %d times, want exactly once", round, name, c.admitted)
				continue
			}
			for _, r := range c.replays {
				if !bytes.Equal(r, c.result) {
					t.Errorf("round %d: intent %s: a replay gave the result %s, but the one admitted attempt committed %s", round, name, r, c.result)
				}
			}
			if got := 1 + len(c.replays) + c.inFlight; got != 2*perEngine {
				t.Errorf("round %d: intent %s: %d answers, want %d (one per attempt)", round, name, got, 2*perEngine)
			}
			replayed += len(c.replays)
			refused += c.inFlight
		}
		t.Logf("round %d: %d intents admitted once each; %d replays, %d in-flight refusals", round, intents, replayed, refused)
		if t.Failed() {
			return
		}
	}

	// The ledger: one done record per intent, nothing else.
	adm := admin(t, schema)
	var records, done, distinct int
	err := adm.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'done'), count(DISTINCT intent) FROM effectfence_records`).Scan(&records, &done, &distinct)
	if err != nil {
		t.Fatal(err)
	}
	if want := rounds * intents; records != want || done != want || distinct != want {
		t.Errorf("the ledger holds %d records (%d done, %d distinct intents), want %d, all done, one per intent", records, done, distinct, want)
	}
}

// TestTransactionPoolerWithoutTheSchemaIsRefused: PgBouncer ignores the search_path a client
// sends, so a store that names its schema (in the URL's search_path, or Config.Schema) lands
// on the role's default search_path instead, here the role's own schema ("$user"). Open must
// see that current_schema() is not the schema it was told, and refuse with an error that says
// so (search_path) before it creates anything: neither the named schema nor any ledger table
// in the role's schema or public. The role may create schemas in the database and tables in its
// own schema, so nothing but the store's own check stands in the way.
func TestTransactionPoolerWithoutTheSchemaIsRefused(t *testing.T) {
	for _, how := range []string{"url_search_path", "config_schema"} {
		t.Run(how, func(t *testing.T) {
			role, own := poolerRole(t, false)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			adm := admin(t, "")
			port := startPgBouncer(t, role)

			// tables lists the ledger's tables in public, the role's schema and fresh.
			fresh := role + "_fresh"
			tables := func() map[string]bool {
				t.Helper()
				rows, err := adm.Query(ctx, `SELECT table_schema || '.' || table_name FROM information_schema.tables
					WHERE table_name LIKE 'effectfence\_%' AND table_schema = ANY($1)`, []string{"public", own, fresh})
				if err != nil {
					t.Fatal(err)
				}
				names, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				set := make(map[string]bool, len(names))
				for _, n := range names {
					set[n] = true
				}
				return set
			}
			before := tables()

			params := map[string]string{"default_query_exec_mode": "simple_protocol", "pool_max_conns": "2"}
			c := Config{}
			if how == "url_search_path" {
				params["search_path"] = fresh
			} else {
				c.Schema = fresh
			}
			c.URL = poolerURL(t, role, port, params)
			s, err := Open(ctx, c)
			switch {
			case err == nil:
				s.Close()
				t.Errorf("Open through the pooler, told schema %s, succeeded (on schema %s); want a refusal naming search_path", fresh, s.schema)
			case !strings.Contains(strings.ReplaceAll(err.Error(), Redact(c.URL), ""), "search_path"): // the URL itself may say search_path
				t.Errorf("Open through the pooler, told schema %s, failed without a word of search_path: %v", fresh, err)
			default:
				t.Logf("Open refused: %v", err)
			}
			var exists bool
			if err := adm.QueryRow(ctx, "SELECT EXISTS (SELECT FROM information_schema.schemata WHERE schema_name = $1)", fresh).Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if exists {
				t.Errorf("Open created the schema %s, which its connections do not reach", fresh)
			}
			var created []string
			for name := range tables() {
				if !before[name] {
					created = append(created, name)
				}
			}
			if len(created) > 0 {
				sort.Strings(created)
				t.Errorf("Open created ledger tables where it was not told to: %s", strings.Join(created, ", "))
			}
		})
	}
}

// TestTransactionPoolerStricterIsolationIsRefused: PgBouncer drops the
// default_transaction_isolation the store sends, so a role (or database) whose default is
// stricter than READ COMMITTED reaches the store's sessions, where a one-statement write's
// guard would read a snapshot taken before it held the intent's lock. Open refuses it, with
// what to set, before using the ledger; with the role set to read committed it opens.
func TestTransactionPoolerStricterIsolationIsRefused(t *testing.T) {
	role, schema := poolerRole(t, true)
	port := startPgBouncer(t, role)
	conn := admin(t, "")
	ctx := context.Background()
	r := pgx.Identifier{role}.Sanitize()
	if _, err := conn.Exec(ctx, "ALTER ROLE "+r+" SET default_transaction_isolation = 'repeatable read'"); err != nil {
		t.Fatal(err)
	}
	u := poolerURL(t, role, port, map[string]string{"default_query_exec_mode": "exec", "pool_max_conns": "2"})
	s, err := Open(ctx, Config{URL: u})
	if err == nil {
		s.Close()
		t.Fatalf("Open through the pooler with the role's default isolation repeatable read succeeded; the store's one-statement writes need read committed")
	}
	if msg := err.Error(); !strings.Contains(msg, `default_transaction_isolation is "repeatable read"`) || !strings.Contains(msg, "ALTER ROLE") {
		t.Fatalf("Open refused without saying what to set: %v", err)
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE "+r+" SET default_transaction_isolation = 'read committed'"); err != nil {
		t.Fatal(err)
	}
	reconnectPooler(t, port) // server connections that kept the old default go
	s = openPooled(t, u)
	if s.Schema() != schema {
		t.Fatalf("the ledger is in %q, want %q", s.Schema(), schema)
	}
}

// TestTransactionPoolerWaitersAreWoken: docs/postgres.md says LISTEN/NOTIFY does not reach
// waiters through a pooler in transaction mode and that they fall back to polling. A
// coalescing wait (PrepareWait) in one store on an intent another store holds ends with the
// holder's recorded result once it commits, through PgBouncer, and no second admission is
// made. The bound is for a hang (a wait that is never woken), not a speed.
func TestTransactionPoolerWaitersAreWoken(t *testing.T) {
	role, schema := poolerRole(t, true)
	port := startPgBouncer(t, role)
	u := poolerURL(t, role, port, map[string]string{"default_query_exec_mode": "exec", "pool_max_conns": "4"})
	conn := admin(t, schema)
	holder, waiter := fence.New(openPooled(t, u), fence.Config{}), fence.New(openPooled(t, u), fence.Config{})
	ctx := context.Background()
	req := fence.Request{Intent: "pooled-wait", Tool: "charge", Args: []byte(`{"amount":7}`)}
	adm, err := holder.Prepare(ctx, req)
	if err != nil || adm.Ticket == nil {
		t.Fatalf("the holder's claim: %v (%+v)", err, adm)
	}
	type answer struct {
		adm fence.Admission
		err error
	}
	done := make(chan answer, 1)
	go func() {
		a, err := waiter.PrepareWait(ctx, req, time.Minute)
		done <- answer{a, err}
	}()
	// The waiter must be waiting (it met the claim in flight and registered for a wake-up)
	// before the holder commits: otherwise it would replay without ever having waited.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM effectfence_waiters WHERE intent = $1", req.Intent).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never registered as waiting on the holder's claim")
		}
		time.Sleep(5 * time.Millisecond)
	}
	result := []byte(`{"charge":"ch_pooled"}`)
	if _, err := holder.Commit(ctx, *adm.Ticket, result); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatalf("the waiter's answer: %v", a.err)
		}
		if a.adm.Ticket != nil || a.adm.Cert == nil || string(a.adm.Cert.Result) != string(result) {
			t.Fatalf("the waiter got %+v, want the holder's recorded result %s", a.adm, result)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not woken within 30 s of the holder's commit through the pooler")
	}
}
