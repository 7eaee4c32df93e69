// Package store chooses and opens the ledger a command uses, from EFFECTFENCE_LEDGER and
// flags, so that no command knows which database is behind the fence.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/postgres"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// Environment variables of SPEC §4.
const (
	EnvLedger    = "EFFECTFENCE_LEDGER"
	EnvLeaseSecs = "EFFECTFENCE_LEASE_SECS"
	EnvTTLSecs   = "EFFECTFENCE_RESULT_TTL_SECS"
	// EnvOnLeaseExpiry is "fence" (the default) or "reclaim": what a lapsed claim of a holder
	// that cannot be seen becomes (see docs/RELIABILITY.md).
	EnvOnLeaseExpiry = "EFFECTFENCE_ON_LEASE_EXPIRY"
)

// Options say which ledger to open and how the engine over it behaves. Commands fill them from
// FromEnv and then let their flags override fields.
type Options struct {
	// Ledger is "" (the default SQLite file for Name), "memory", a file path, or a
	// postgres:// URL.
	Ledger string
	// Name picks the default file: "server" for serve, WrapName(argv) for wrap.
	Name string
	// LeaseTTL and ResultTTL are the engine's (fence.Config; 0 is the default). They are not
	// bounded here, so a test may use milliseconds; the commands take only what LeaseSeconds
	// and ResultSeconds accept. They are durations: 60 is 60 ns, a lease that lapses at once
	// (its calls end unknown, fenced), not a minute.
	LeaseTTL      time.Duration
	ResultTTL     time.Duration
	OnLeaseExpiry fence.ExpiryPolicy
	// SweepEvery is how often an open ledger drops expired outcomes (default: DefaultSweepEvery,
	// or the result TTL when that is shorter).
	SweepEvery time.Duration
	// Log, when set, receives a line when the background sweep or recovery fails (an outcome
	// stuck in the spool, a database that does not answer), once per distinct error.
	Log io.Writer
	// RecoverEvery overrides RecoverEvery (tests).
	RecoverEvery time.Duration
	// SweepInBackground starts the first sweep of expired outcomes in the background as Open
	// returns, instead of before. Wrap and serve set it: a ledger left unswept for days (or
	// given a shorter result TTL) holds a backlog that takes about 55 ms per 1,000 records to
	// drop on a 2-core VM's SQLite file (about a minute for a million; BenchmarkSweepBacklog in
	// pkg/store/postgres), and the agent's first call would wait for all of it. The gates
	// ignore expired outcomes whether or not they were swept. The ledger commands leave it
	// unset, so what they list has no expired outcome.
	SweepInBackground bool
	// KeepEvents: the sweeps drop expired outcomes only, never audit events (fence.Config).
	// The ledger commands set it: their ResultTTL is the operator's environment, not the
	// ledger's, and a look with a shorter one dropped the audit trail the processes recording
	// the ledger's calls keep longer.
	KeepEvents bool
	// Existing opens only a ledger that is there already: no schema or table is created, a
	// PostgreSQL schema without a ledger is an error (postgres.ErrNoLedger), and so is a SQLite
	// file that is not yet a ledger (sqlite.Options.Existing). The ledger commands set it, and
	// check that a SQLite file exists before they open it: an operator's look never creates a
	// ledger.
	Existing bool
	// AtRest opens a SQLite ledger that no process has open read-only, writing nothing, not
	// even beside the file (sqlite.Options.AtRest): for an operator's look where SQLite cannot
	// write there (a full disk, a read-only file system). Nothing is recovered, swept or
	// drained from the spool, and nothing runs in the background.
	AtRest bool
}

// DefaultSweepEvery is how often an open ledger sweeps expired outcomes.
const DefaultSweepEvery = 10 * time.Minute

// FromEnv reads EFFECTFENCE_LEDGER, EFFECTFENCE_LEASE_SECS, EFFECTFENCE_RESULT_TTL_SECS and
// EFFECTFENCE_ON_LEASE_EXPIRY, but none of the variables named in overridden: a command's flag
// sets that setting, and flags win over the environment (README), so a value the flag
// replaces is not read, and a malformed one does not stop the command.
func FromEnv(name string, overridden ...string) (Options, error) {
	o := Options{Ledger: os.Getenv(EnvLedger), Name: name}
	read := func(env string) bool { return !slices.Contains(overridden, env) }
	var err error
	if !read(EnvLedger) {
		o.Ledger = ""
	}
	if read(EnvLeaseSecs) {
		if o.LeaseTTL, err = envSeconds(EnvLeaseSecs, LeaseSeconds); err != nil {
			return o, err
		}
	}
	if read(EnvTTLSecs) {
		if o.ResultTTL, err = envSeconds(EnvTTLSecs, ResultSeconds); err != nil {
			return o, err
		}
	}
	if read(EnvOnLeaseExpiry) {
		if o.OnLeaseExpiry, err = fence.ParseExpiryPolicy(strings.TrimSpace(os.Getenv(EnvOnLeaseExpiry))); err != nil {
			return o, fmt.Errorf("%s: %w", EnvOnLeaseExpiry, err)
		}
	}
	return o, nil
}

func envSeconds(name string, check func(string, float64) (time.Duration, error)) (time.Duration, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a number of seconds", name, v)
	}
	return check(name, n)
}

// StateDir is $XDG_STATE_HOME/effectfence, or ~/.local/state/effectfence. A relative
// XDG_STATE_HOME is ignored, as the XDG base directory specification says: taken as it was, it
// named a directory under each working directory (a literal "~/state" from an MCP config's
// env, which no shell expands, made a "~" directory there), so serve's ledger, and every
// default ledger's spool, depended on where the process was started.
func StateDir() (string, error) {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && ignoredStateHome() == "" {
		return filepath.Join(x, "effectfence"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot find the default ledger directory: %w (set XDG_STATE_HOME or %s)", err, EnvLedger)
	}
	return filepath.Join(home, ".local", "state", "effectfence"), nil
}

// ignoredStateHome is XDG_STATE_HOME when StateDir ignores it (set, not absolute), else "".
func ignoredStateHome() string {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && !filepath.IsAbs(x) {
		return x
	}
	return ""
}

// Supported is the list of ledger forms, quoted in errors.
const Supported = `a SQLite file path (e.g. ./ledger.db or /var/lib/effectfence/l.db), "memory", or a postgres://… (postgresql://…) URL`

// CheckLedger refuses a ledger string that names no supported ledger but would otherwise be
// taken for a SQLite file under the working directory: another URL scheme (redis://, pg://,
// sqlite:///x, file:/x), postgres:// or memory in other letter cases, postgres// (its colon
// lost), a ~ or $VAR path no
// shell expanded, libpq's key=value connection string (host=… dbname=…), or surrounding
// spaces.
// A relative file whose name has a colon can be written ./a:b.db.
func CheckLedger(ledger string) error {
	bad := func(why string) error {
		return fmt.Errorf("ledger %s: %s; the supported forms are %s", shownLedger(ledger), why, Supported)
	}
	switch {
	case ledger == "" || ledger == "memory" || isPostgres(ledger):
		return nil
	case strings.TrimSpace(ledger) != ledger:
		return bad("leading or trailing white space")
	case strings.IndexByte(ledger, 0) >= 0:
		// Only a policy file can give one (an argument or an environment variable cannot hold
		// it): no file name may, and wrap refused to start with "invalid argument".
		return bad("a NUL character (\\u0000), which no file name can hold")
	case strings.EqualFold(ledger, "memory"):
		return bad(`write "memory" in lower case`)
	case strings.HasPrefix(strings.ToLower(ledger), "postgres://"), strings.HasPrefix(strings.ToLower(ledger), "postgresql://"):
		return bad("write the scheme postgres:// in lower case")
	case strings.HasPrefix(strings.ToLower(ledger), "postgres//"), strings.HasPrefix(strings.ToLower(ledger), "postgresql//"):
		// A path too (postgres/…), but a URL whose colon was lost: each process would keep
		// its own file under its working directory, no shared ledger.
		return bad("the colon of the scheme is missing: write postgres://…")
	case ledger == "~" || strings.HasPrefix(ledger, "~"):
		return bad("~ is not expanded here (the shell expands it only at the start of an unquoted word); write the full path, e.g. /home/you/...")
	case strings.HasPrefix(ledger, "$"):
		return bad("$… is not expanded here (a shell expands it; an MCP config's env and a policy file are not read by one); write the full path, e.g. /home/you/...")
	case keywordValue(ledger):
		// Not quoted: such a string may hold password=….
		return fmt.Errorf("ledger: a key=value connection string (%s=…) is not read here (it would name a SQLite file); write it as postgres://user@host:port/dbname?sslmode=…; the supported forms are %s",
			strings.TrimSpace(ledger[:strings.IndexByte(ledger, '=')]), Supported)
	}
	if i := strings.IndexByte(ledger, ':'); i > 0 {
		scheme := ledger[:i]
		drive := len(scheme) == 1 && len(ledger) > 2 && (ledger[2] == '\\' || ledger[2] == '/') // C:\x, C:/x
		if !drive && validScheme(scheme) {
			return bad(fmt.Sprintf("%q is not a supported scheme", scheme+":"))
		}
	}
	return nil
}

// shownLedger is a refused ledger string as CheckLedger's errors show it, which reach logs
// (wrap's stderr): quoted, unless it could hold a password (user information before an '@', a
// password= or sslpassword= parameter, in any letter case, its name percent-encoded or not, as
// pgx decodes it), which is then left out with all that follows its scheme. Before 2026-12-05
// the string was quoted whole (postgresql+psycopg2://u:PASSWORD@…), and before 2026-12-06 so
// was one whose parameter's name was percent-encoded (?pass%77ord=…).
func shownLedger(s string) string {
	if !strings.Contains(s, "@") && !strings.Contains(strings.ToLower(percentDecoded(s)), "password") {
		return strconv.Quote(s)
	}
	if scheme, _, ok := strings.Cut(s, ":"); ok && validScheme(scheme) {
		return strconv.Quote(scheme+":…") + " (the rest not shown: it may hold a password)"
	}
	return "(not shown: it may hold a password)"
}

// percentDecoded is s with each valid percent escape (%XX) decoded, as pgx and libpq decode a
// URL's parts; what is not a valid escape is left as it is.
func percentDecoded(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(c))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// keywordValue reports whether s starts like libpq's key=value connection string
// ("host=db dbname=ledger"), which pgx reads but the ledger takes only as a postgres:// URL. A
// file of such a name can be written ./host=x.db.
func keywordValue(s string) bool {
	key, _, ok := strings.Cut(s, "=")
	if !ok {
		return false
	}
	switch strings.TrimSpace(key) {
	case "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service", "sslmode",
		"sslcert", "sslkey", "sslrootcert", "sslpassword", "connect_timeout", "application_name",
		"options", "target_session_attrs", "search_path":
		return true
	}
	return false
}

// validScheme reports whether s has the shape of a URL scheme (RFC 3986).
func validScheme(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// Location returns where the ledger of o lives: "memory", a postgres URL, or a file path.
func (o Options) Location() (string, error) {
	if err := CheckLedger(o.Ledger); err != nil {
		return "", err
	}
	switch {
	case o.Ledger == "memory":
		return "memory", nil
	case isPostgres(o.Ledger):
		return o.Ledger, nil
	case o.Ledger != "":
		return o.Ledger, nil
	}
	if o.Name == "" {
		return "", fmt.Errorf("no ledger named: set %s or --ledger", EnvLedger)
	}
	dir, err := StateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, o.Name+".db"), nil
}

// Ledger is an open ledger: the engine over it and where it lives. It sweeps expired outcomes
// in the background until Close.
type Ledger struct {
	*fence.Engine
	Location string
	// SweptAtOpen is how many expired outcomes Open dropped before it returned (none with
	// SweepInBackground), so a command that sweeps can report them with its own.
	SweptAtOpen int

	stop  context.CancelFunc
	swept chan struct{}
	// watched is closed once the goroutine that stops the background work when the engine
	// alone is closed has ended.
	watched chan struct{}
	log     io.Writer
	// every and recoverEvery are how often the background goroutine sweeps and recovers.
	every, recoverEvery time.Duration
}

func isPostgres(loc string) bool {
	return strings.HasPrefix(loc, "postgres://") || strings.HasPrefix(loc, "postgresql://")
}

// openStore opens the store behind loc for a fence whose lease is lease (0: the default).
func openStore(ctx context.Context, loc string, existing bool, lease time.Duration) (fence.Store, error) {
	switch {
	case loc == "memory":
		return fence.NewMemoryStore(), nil
	case isPostgres(loc):
		// Only the ledger commands open an existing ledger, and each is brief: no warm pool.
		return postgres.Open(ctx, postgres.Config{URL: loc, Existing: existing, Brief: existing, Lease: lease})
	default:
		return sqlite.Open(ctx, loc, sqlite.Options{Existing: existing})
	}
}

// Open opens the ledger of o and returns an engine over it, after marking in-flight intents of
// dead processes unknown and sweeping expired outcomes (or starting to: SweepInBackground).
func Open(ctx context.Context, o Options) (*Ledger, error) {
	loc, err := o.Location()
	if err != nil {
		return nil, err
	}
	if o.AtRest {
		if loc == "memory" || isPostgres(loc) {
			return nil, errors.New("only a SQLite ledger file is read at rest")
		}
		st, err := sqlite.Open(ctx, loc, sqlite.Options{Existing: o.Existing, AtRest: true})
		if err != nil {
			return nil, err
		}
		eng := fence.New(st, fence.Config{LeaseTTL: o.LeaseTTL, ResultTTL: o.ResultTTL, OnLeaseExpiry: o.OnLeaseExpiry, KeepEvents: true})
		done := make(chan struct{})
		close(done)
		return &Ledger{Engine: eng, Location: loc, stop: func() {}, swept: done, watched: done, log: o.Log}, nil
	}
	st, err := openStore(ctx, loc, o.Existing, o.LeaseTTL)
	if err != nil {
		return nil, err
	}
	spool, err := SpoolDir(loc)
	if err != nil {
		st.Close()
		return nil, err
	}
	old := "" // where an earlier build kept this ledger's spool, if elsewhere
	if ps, _ := st.(*postgres.Store); ps != nil && ps.SpoolKey() != "" {
		old, spool = spool, postgresSpool(filepath.Dir(spool), ps.SpoolKey())
	} else if !isPostgres(loc) && loc != "memory" && spool != loc+".spool" {
		old = loc + ".spool" // a symbolic link's (see SpoolDir)
	}
	if isPostgres(loc) {
		loc = postgres.Redact(loc) // shown in errors, logs and reports: never the password
	} else if loc != "memory" && o.Log != nil {
		if why := sqlite.Volatile(loc); why != "" {
			fmt.Fprintf(o.Log, "effectfence: warning: ledger %s %s\n", safetext.Escape(loc), why)
		}
		if x := ignoredStateHome(); x != "" && o.Ledger == "" {
			// Before StateDir ignored it, the default ledger was under the working directory.
			was, err := filepath.Abs(filepath.Join(x, "effectfence", filepath.Base(loc)))
			if _, serr := os.Stat(was); err == nil && serr == nil {
				fmt.Fprintf(o.Log, "effectfence: warning: XDG_STATE_HOME=%s is not an absolute path, so it is ignored (the XDG base directory specification says so) and the default ledger is %s; an earlier effectfence used %s, whose records are not consulted: check it for calls left unknown with: effectfence ledger ls --ledger %s\n",
					safetext.Escape(x), safetext.Escape(loc), safetext.Escape(was), safetext.Escape(was))
			} else {
				fmt.Fprintf(o.Log, "effectfence: note: XDG_STATE_HOME=%s is not an absolute path, so it is ignored (the XDG base directory specification says so); the default ledger is %s\n", safetext.Escape(x), safetext.Escape(loc))
			}
		}
	}
	if ps, _ := st.(*postgres.Store); ps != nil && o.Log != nil && len(ps.CreatedBeside()) > 0 {
		fmt.Fprintf(o.Log, "effectfence: warning: %s\n", safetext.Escape(createdBeside(loc, ps.Schema(), ps.CreatedBeside())))
	}
	if err := checkFormerSpools(ctx, st, spool); err != nil {
		st.Close()
		return nil, fmt.Errorf("ledger %s: %w", loc, err)
	}
	cfg := fence.Config{LeaseTTL: o.LeaseTTL, ResultTTL: o.ResultTTL, OnLeaseExpiry: o.OnLeaseExpiry, SpoolDir: spool, KeepEvents: o.KeepEvents}
	// A spool named after the URL (the server does not say where the ledger is) is the URL's:
	// from another environment (PGOPTIONS, PGDATABASE, PGUSER) the URL reaches another ledger.
	cfg.SpoolShared = isPostgres(o.Ledger) && old == ""
	if err := drainOldSpool(ctx, st, cfg, old); err != nil {
		st.Close()
		return nil, fmt.Errorf("ledger %s: %w", loc, err)
	}
	eng := fence.New(st, cfg)
	if _, err := eng.Recover(ctx); fence.OnlyUnreadable(err) {
		// Every attempt of such an intent fails on its record, so it stays fenced; the rest of
		// the ledger works, and refusing to open it would stop every call for one record.
		if o.Log != nil {
			fmt.Fprintf(o.Log, "effectfence: warning: %s\n", safetext.Escape(strings.ReplaceAll(err.Error(), "\n", "; ")))
		}
	} else if err != nil {
		st.Close()
		return nil, fmt.Errorf("ledger %s: %w", loc, err)
	}
	swept := 0
	if !o.SweepInBackground {
		if swept, err = eng.Sweep(ctx); err != nil {
			st.Close()
			return nil, fmt.Errorf("ledger %s: %w", loc, err)
		}
	}
	every := o.SweepEvery
	if every <= 0 {
		every = min(DefaultSweepEvery, eng.Config().ResultTTL)
	}
	sctx, stop := context.WithCancel(context.Background())
	recoverEvery := o.RecoverEvery
	if recoverEvery <= 0 {
		recoverEvery = RecoverEvery
	}
	l := &Ledger{Engine: eng, Location: loc, SweptAtOpen: swept, stop: stop, swept: make(chan struct{}), log: o.Log, every: every, recoverEvery: recoverEvery}
	go l.sweep(sctx, o.SweepInBackground)
	// The background work ends with the engine too: a caller that kept only l.Engine (README's
	// quick start) closes that. Before 2026-12-07 it went on against the closed store for the
	// life of the process (TestEngineCloseStopsTheLedgersBackground).
	l.watched = make(chan struct{})
	go func() {
		defer close(l.watched)
		select {
		case <-eng.Done():
			stop()
		case <-sctx.Done():
		}
	}()
	return l, nil
}

// testHookFirstSweep, when set (by tests), runs in the background goroutine before a sweep
// that Open left to it (SweepInBackground).
var testHookFirstSweep func()

// SpoolDir is where outcomes wait that the ledger at loc could not take (see fence.Settle):
// beside a SQLite file (<file>.spool, the file a symbolic link leads to), none for memory.
// For PostgreSQL it is the spool named after the URL (spool/<16 hex digits of the redacted
// URL's hash> in the state directory), which Open uses only when the server does not say
// where the ledger is (postgres.Store.SpoolKey); else it drains it into the ledger's own.
func SpoolDir(loc string) (string, error) {
	switch {
	case loc == "memory":
		return "", nil
	case isPostgres(loc):
		dir, err := StateDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, "spool", canon.Sum([]byte(postgres.SpoolName(loc)))[:16]), nil
	}
	// A symbolic link to the file is no name of its own (SQLite follows it), so its spool is
	// the file's: kept beside the link, it was a spool no process using the file's own name
	// read, which took a dead holder's re-run-safe claim over while its commit waited there.
	if real, err := filepath.EvalSymlinks(loc); err == nil {
		loc = real
	}
	return loc + ".spool", nil
}

// drainOldSpool records the outcomes an earlier build kept for this ledger in the spool old
// (beside a symbolic link to the file, or named after a PostgreSQL URL as written), which no
// engine reads any more.
func drainOldSpool(ctx context.Context, st fence.Store, cfg fence.Config, old string) error {
	if old == "" || old == cfg.SpoolDir {
		return nil
	}
	if files, err := waitingElsewhere(old, cfg.SpoolDir); err != nil || len(files) == 0 {
		return err
	}
	// It was named after a URL or a link, which may have led to other ledgers: only outcomes
	// of claims this ledger holds are recorded, the others left for their own ledger.
	cfg.SpoolDir, cfg.SpoolShared = old, true
	_, err := fence.New(st, cfg).DrainSpool(ctx)
	return err
}

// checkFormerSpools refuses a SQLite ledger that was moved away from a name beside which
// outcomes still wait in a spool (NAME.spool): a holder reported them while the file was
// being moved (its path named no file, so they were kept there), and no process using the
// file's new name reads that spool. Opened anyway, the holder's claim would go unknown, or
// be taken over and run again when re-run safe, while its outcome waits.
func checkFormerSpools(ctx context.Context, st fence.Store, spool string) error {
	ls, ok := st.(*sqlite.Store)
	if !ok {
		return nil
	}
	names, err := ls.FormerNames(ctx)
	if err != nil {
		return err
	}
	others, err := ls.OtherNames(ctx)
	if err != nil {
		return err
	}
	for _, old := range others {
		dir := old + ".spool"
		files, err := waitingElsewhere(dir, spool)
		if err != nil || len(files) == 0 {
			continue
		}
		if !slices.Contains(names, old) {
			// Another file is at that name now, whose spool that is; but an outcome of a
			// claim this ledger holds is this one's (a new ledger made at the old name since
			// leaves it there: fence.DrainSpool), and it must not be judged without it.
			if files, err = fence.SpoolHolds(ctx, st, dir); err != nil || len(files) == 0 {
				continue
			}
			if heldThereToo(ctx, old, dir, files) {
				// The ledger at that name holds those claims too (this file is a copy of it,
				// or it of this one: sqlite3's .backup while the claims were in flight), and
				// its processes drain them. Refused, a copy opened to look at it advised moving
				// the live ledger's outcomes beside the copy, and its claims lost them
				// (TestCopyOfALedgerOpensBesideTheOriginalsSpool).
				continue
			}
		}
		return fmt.Errorf("the ledger file was used as %s, and %d outcome(s) wait in the spool beside that name (%s), which no process using this name reads: a holder reported them while the file was moved away. "+
			"Stop every effectfence process that uses the ledger; if this file was the last ledger kept at %s, move them beside this name (mkdir -p %s && mv %s/*.json %s/) or put the file back at %s; nothing was changed",
			safetext.Escape(old), len(files), safetext.Escape(dir), safetext.Escape(old), safetext.Escape(spool), safetext.Escape(dir), safetext.Escape(spool), safetext.Escape(old))
	}
	return nil
}

// heldThereToo reports whether the ledger file at name holds the claim of every outcome file
// in files (spool files beside name), read without changing it; false when it cannot tell.
func heldThereToo(ctx context.Context, name, dir string, files []string) bool {
	there, err := sqlite.Open(ctx, name, sqlite.Options{ReadOnly: true, BusyTimeout: 5 * time.Second})
	if err != nil {
		return false
	}
	defer there.Close()
	theirs, err := fence.SpoolHolds(ctx, there, dir)
	if err != nil {
		return false
	}
	for _, f := range files {
		if !slices.Contains(theirs, f) {
			return false
		}
	}
	return true
}

// waitingElsewhere returns the outcomes waiting in the spool dir when it is a directory
// other than the spool ours (not one reached under two names, ./ledger.db.spool and
// ledger.db.spool, which Recover drains); none when dir is not there.
func waitingElsewhere(dir, ours string) ([]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, nil
	}
	if o, err := os.Stat(ours); err == nil && os.SameFile(fi, o) {
		return nil, nil
	}
	return fence.SpoolFiles(dir)
}

// postgresSpool is the spool of the PostgreSQL ledger named key (postgres.Store.SpoolKey),
// under dir.
func postgresSpool(dir, key string) string {
	return filepath.Join(dir, "db-"+canon.Sum([]byte(key))[:16])
}

// RecoverEvery is how often an open ledger applies the lease rules to every claim (Recover)
// and reports outcomes waiting in its spool.
const RecoverEvery = 10 * time.Second

// sweep drops expired outcomes every l.every, and runs Recover every l.recoverEvery, until ctx
// ends. A failed sweep is retried at the next tick: the gates ignore expired outcomes anyway,
// so a late sweep costs only disk. Recover's errors are retried the same way (an outcome in the
// spool stays there until the ledger takes it). The two take their turns apart: a sweep
// waiting on a connection that no longer answers (a proxy in front of a server that failed
// over holds its old connections) held their one goroutine, and no Recover ran, nothing in the
// spool recorded, while it waited (TestRecoverGoesOnWhileASweepWaitsOnAConnection).
func (l *Ledger) sweep(ctx context.Context, now bool) {
	defer close(l.swept)
	// last is what each task last reported, its digits left out, so that a lasting failure is
	// one line: the driver's error names the local port of each new connection it tried, and
	// reading each as news logged the same cut database every tick. Another cause (other
	// words) is logged when it comes.
	var mu sync.Mutex // the two tasks report from their own goroutines
	last := map[string]string{}
	report := func(task string, err error) {
		if engineClosed(l.Engine) {
			return // an engine closed alone closes its store after Done: that is no news
		}
		msg := ""
		if err != nil && ctx.Err() == nil {
			msg = err.Error()
		}
		mu.Lock()
		defer mu.Unlock()
		if l.log != nil && withoutDigits(msg) != last[task] {
			if msg == "" {
				fmt.Fprintf(l.log, "effectfence: ledger %s: background %s works again\n", l.Location, task)
			} else {
				fmt.Fprintf(l.log, "effectfence: ledger %s: background %s failed (retried every tick): %s\n", l.Location, task, safetext.Escape(msg))
			}
		}
		last[task] = withoutDigits(msg)
	}
	recovered := make(chan struct{})
	go func() {
		defer close(recovered)
		r := time.NewTicker(l.recoverEvery)
		defer r.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.C:
				// A Recover ends once the next is due (at least RecoverEvery on): one waiting
				// on a ledger that does not answer (a server stopped, a connection that no
				// longer answers) held the spool's lock, and every drain a call makes behind
				// it (a duplicate's DrainedFor, a Settle's look at what waits), until the
				// ledger answered (TestDrainForACallEndsWhileTheServerDoesNotAnswer).
				rctx, cancel := context.WithTimeout(ctx, max(l.recoverEvery, RecoverEvery))
				_, err := l.Engine.Recover(rctx)
				cancel()
				report("recovery (spool drain and lease rules)", err)
			}
		}
	}()
	defer func() { <-recovered }()
	t := time.NewTicker(l.every)
	defer t.Stop()
	if now { // the sweep Open left to this goroutine (SweepInBackground)
		if testHookFirstSweep != nil {
			testHookFirstSweep()
		}
		_, err := l.Engine.Sweep(ctx)
		report("sweep", err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, err := l.Engine.Sweep(ctx)
			report("sweep", err)
		}
	}
}

// engineClosed reports whether e's Close has begun.
func engineClosed(e *fence.Engine) bool {
	select {
	case <-e.Done():
		return true
	default:
		return false
	}
}

// Close stops the background sweep, flushes the counters and closes the store.
func (l *Ledger) Close() error {
	l.stop()
	<-l.swept
	<-l.watched
	return l.Engine.Close()
}

// CheckReport is what Check found out about a ledger.
type CheckReport = sqlite.CheckReport

// Check inspects the ledger of o without changing it (see sqlite.Check). A memory ledger has
// nothing to check; a PostgreSQL ledger is checked by its own tools.
func Check(ctx context.Context, o Options) (*CheckReport, error) {
	loc, err := o.Location()
	if err != nil {
		return nil, err
	}
	switch {
	case loc == "memory":
		return &CheckReport{Path: loc, OK: true, Kind: "memory", BuildSchema: sqlite.SchemaVersion,
			Advice: []string{"a memory ledger lives and dies with its process: nothing on disk to check"}}, nil
	case isPostgres(loc):
		return nil, fmt.Errorf("ledger %s: check inspects SQLite files; use PostgreSQL's own tools for a database ledger", postgres.Redact(loc))
	}
	return sqlite.Check(ctx, loc)
}

// withoutDigits is s with every run of digits written as one '#': two errors that differ only
// in numbers (ports, addresses, process ids) read the same.
func withoutDigits(s string) string {
	var b strings.Builder
	digits := false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

// createdBeside is the warning of a PostgreSQL ledger that Open created, empty, or found unused
// (an earlier Open's, whose warning a lost answer may have swallowed), in a database that holds
// others (postgres.Store.CreatedBeside): a new tenant's or environment's ledger, or
// one that should have been an existing ledger under its new name (a schema renamed, a URL
// or a role's search_path changed), where every call that ledger recorded runs again. Up to
// five of the others are named. Before 2026-12-07 nothing was said
// (TestLedgerCreatedBesideOthersIsToldOf).
func createdBeside(loc, schema string, beside []string) string {
	const most = 5
	names := make([]string, 0, most)
	for _, b := range beside[:min(len(beside), most)] {
		names = append(names, strconv.Quote(b))
	}
	list := strings.Join(names, ", ")
	if len(beside) > most {
		list += fmt.Sprintf(" and %d more", len(beside)-most)
	}
	return fmt.Sprintf("ledger %s: created a new, empty ledger in schema %q (this open, or an earlier one: no claim has used it yet), while this database holds effectfence ledgers in schemas %s. "+
		"If this fence's calls were recorded in one of those (its schema renamed, or the URL's or the role's search_path changed since), "+
		"every call recorded there will run again here: stop this process, name that schema in the URL (search_path=…), and drop schema %q if nothing else is in it. "+
		"A new ledger beside the others (a tenant's, an environment's) needs nothing",
		loc, schema, list, schema)
}
