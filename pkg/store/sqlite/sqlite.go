// Package sqlite is the embedded durable ledger: a fence.Store in one SQLite file (pure Go,
// modernc.org/sqlite, no cgo) that several processes on one host share safely.
//
// Guarantees. Every Update is one SQLite transaction begun with BEGIN IMMEDIATE, so it holds
// the file's write lock from its first statement: two Updates, in this process or any other
// process using the same file, never interleave, and two processes can never both be admitted
// for one intent. An Update returns nil only after its transaction committed in WAL mode with
// synchronous=FULL, that is, after the WAL was fsynced. View reads a consistent snapshot on a
// separate reader connection and never blocks or is blocked by the writer.
//
// Group commit. Within one process all Updates go through one writer connection and a queue.
// An Update that finds no transaction running runs its own on its goroutine; Updates that
// arrive meanwhile wait and then run together in the next transaction, led by the first of
// them, which takes the batch once it holds the lock. An Update whose context ends while it
// waits (in the queue, or leading, for another process's lock) returns the context's error,
// and its function never runs; once taken into a batch it returns only what the batch did
// (its function is skipped if its context has ended by then). Functions in one batch run one
// after another, each seeing the writes of those before it, so the batch is equivalent to running them serially; the cost of the fsync is shared,
// and every caller learns its result only after the shared COMMIT is durable. A batch runs
// without savepoints; if one of its functions fails, the transaction is rolled back and the
// batch runs again with each function in its own SAVEPOINT, so that only the failing ones are
// undone. A function may thus run twice, which the fence.Store contract allows. A function
// that panics fails its own Update alone; one that ends its goroutine (runtime.Goexit, as
// t.FailNow does) ends the goroutine running the batch, which may be another caller's, and the
// batch's transaction: its other callers get an error, and the store goes on (see runBatch).
//
// Limits. The file must be on a local filesystem (SQLite's locks and WAL shared memory do not
// work over NFS). A file this build cannot read (not SQLite, not an effectfence ledger, a newer
// schema, torn or corrupt) is refused with an error that names `effectfence ledger check`.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/effectfence/effectfence/internal/durabledir"
	"github.com/effectfence/effectfence/pkg/fence"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
	"modernc.org/sqlite/vfs"
)

// Options tune a Store. The zero value is the default.
type Options struct {
	// ReadOnly opens the file for inspection: no schema migration, Update fails. A ledger of an
	// older schema this build can read as it is (see oldestReadable) is read unmigrated.
	ReadOnly bool
	// BusyTimeout is how long a transaction waits for another process's write lock before
	// failing (default 30 s): for its turn in the writers' queue, then for SQLite's lock, so
	// up to twice this when another process stops inside its transaction; the next
	// transactions do not wait for a queue that stayed held that long (queue.go). An Update
	// whose context ends stops waiting sooner (lead).
	BusyTimeout time.Duration
	// Now is the store's clock (default time.Now); tests of expiry set it.
	Now func() time.Time
	// MaxBatch bounds how many concurrent Updates share one transaction (default 64; 1 turns
	// group commit off).
	MaxBatch int
	// SkipQuickCheck opens for writing without the integrity check (PRAGMA integrity_check;
	// quick_check before 2026-12-06: see quickCheck). Only for callers that have just checked
	// the file themselves.
	SkipQuickCheck bool
	// Existing opens a ledger that is there already, for an operator's look (the ledger
	// commands): a file that holds no ledger yet, an empty SQLite database (no table, no
	// effectfence mark), is refused, and nothing is written in it. Without it such a file
	// becomes a new ledger, as an empty file does.
	Existing bool
	// AtRest opens a ledger that no process has open read-only without writing anything, for
	// a look where SQLite cannot write beside the file (a full disk, a read-only file system):
	// the file and the committed frames of its log are read as SQLite's recovery would apply
	// them, and neither is changed, nor its index (see frozen.go). It implies ReadOnly, and
	// fails with ErrNotAtRest when a process has the ledger open. StillAtRest says whether
	// one opened it since.
	AtRest bool

	vfs string // the VFS an AtRest store reads its image through
}

// DefaultBusyTimeout is how long a transaction waits for another process's lock.
const DefaultBusyTimeout = 30 * time.Second

// Store is a ledger in a SQLite file. It is safe for concurrent use.
type Store struct {
	path    string
	opt     Options
	release func()  // the file's registration as open in this process (here.go)
	w       *sql.DB // one connection: every write goes through the leader of the write queue
	r       *sql.DB // readers

	wconn *sql.Conn // w's only connection, held from Open to Close (see raw.go): after Open nothing may use w itself, it would wait for this connection forever
	wlost bool      // database/sql discarded wconn (a batch's leader left its Raw callback by Goexit or panic); the next batch takes a new one

	mu       sync.RWMutex // guards closed against Update/View entering
	closed   bool
	inflight sync.WaitGroup
	rmu      sync.Mutex                     // guards rstmts
	rstmts   map[any]map[string]driver.Stmt // each reader connection's statements (see readerRunner)
	// noEventTokens: a read-only store over a ledger whose events table has no token column
	// yet (eventTokens): its events are read without it, and its readers do not prepare the
	// queries that name it.
	noEventTokens bool
	wstmts        map[string]driver.Stmt // prepared on wconn, used only inside its Raw callbacks

	decoded *decodedCache // records decoded by Get, by their exact bytes (decoded.go)

	qmu     sync.Mutex // guards queue and leading
	queue   []*update  // Updates waiting for a transaction
	leading bool       // an Update is running a batch and will hand on or drain the queue
	batch   batch      // the leader's (runBatch), kept for the next to save an allocation

	frozen *frozenImage // what an AtRest store reads (frozen.go)
	vfs    *vfs.FS

	turns *writerQueue // the writers of all processes take turns through it (queue.go); nil when read-only

	// file is the ledger file as Open found it at the path; gone, while set, is why the path
	// names it no longer, and every write is refused with it (see checkFile). The leader
	// alone uses both after Open.
	file os.FileInfo
	gone error
	// index watches the shared-memory index beside the file (real-shm) that Open opened
	// (first); shmGone, once set, refuses every write (see checkIndex).
	index   indexWatch
	first   os.FileInfo
	shmGone error
	// real is the path SQLite opened (links resolved): its log is real-wal.
	real string
	// unsettled is set when a COMMIT failed and no COMMIT that changed a row has succeeded
	// since (see ClaimInDoubt).
	unsettled atomic.Bool
}

// ClaimInDoubt says whether a claim this store was asked to write and failed to may still be
// in the ledger (fence.ClaimDoubter). A COMMIT that fails at its fsync (EIO, or EROFS when the
// file system turns read-only) has written its frames, commit frame included, to the log:
// this process's index never counts them, but they are valid frames, so if the process ends
// before it writes again (kill -9, a crash), the next open rebuilds the index from the log
// and finds the transaction committed: its claim held by a process gone, the call it was told
// was NOT executed fenced as unknown. The next COMMIT that changes a row writes its frames
// where those were (or starts the log again), and they no longer count: until then every claim
// whose write failed is in doubt (TestClaimWhoseSyncFailedIsReleasedAfterAKill).
func (s *Store) ClaimInDoubt(string) bool { return s.unsettled.Load() }

// update is one queued Update. res receives exactly one answer: its result, or lead (the
// caller becomes the leader and runs the next batch itself).
type update struct {
	ctx context.Context
	fn  func(fence.Tx) error
	res chan answer
	// handed: this Update leads, or was handed the lead (guarded by qmu): it no longer
	// leaves the queue when its context ends.
	handed bool
}

type answer struct {
	err  error
	lead bool
}

// ErrClosed is returned by calls on a closed Store.
var ErrClosed = errors.New("sqlite ledger: store is closed")

// Open opens (creating if needed) the ledger at path. A new file is created 0600, its
// directory 0700 if it has to be created. The schema is created or migrated.
func Open(ctx context.Context, path string, opt Options) (_ *Store, err error) {
	if opt.BusyTimeout <= 0 {
		opt.BusyTimeout = DefaultBusyTimeout
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 64
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("ledger %s: %w", path, err)
	}
	if of := queueFileOf(abs); of != "" {
		return nil, fmt.Errorf("ledger %s is the writers' queue lock file of the ledger %s, not a ledger: using it as one would undo that ledger's locks in a process holding both; choose another path with --ledger or EFFECTFENCE_LEDGER", path, of)
	}
	if opt.AtRest {
		opt.ReadOnly = true
	}
	if !opt.ReadOnly {
		// A failed open (a full disk) takes back the log and index it made, if it may.
		takeBack := madeBeside(abs)
		defer func() {
			if err != nil {
				takeBack()
			}
		}()
	}
	if err := prepareFile(abs, opt.ReadOnly); err != nil {
		return nil, err
	}
	var img *frozenImage
	var frozenVFS *vfs.FS
	if opt.AtRest {
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("ledger %s: %w", path, err)
		}
		skipped, err := aside(fi, func() (err error) {
			img, opt.vfs, frozenVFS, err = serveFrozen(abs)
			return err
		})
		if skipped {
			err = fmt.Errorf("ledger %s: %w (this one)", path, ErrNotAtRest)
		}
		if err != nil {
			return nil, err
		}
	}
	s := &Store{path: abs, opt: opt, decoded: newDecodedCache(), release: hold(abs), index: indexWatch{fd: -1}, frozen: img, vfs: frozenVFS}
	if s.r, err = sql.Open("sqlite", dsn(abs, opt, false)); err != nil {
		return nil, s.fail(err)
	}
	s.r.SetMaxOpenConns(maxReaders)
	s.r.SetMaxIdleConns(maxReaders) // idle readers are never closed: their statements stay valid
	if err := retryBusy(ctx, opt.BusyTimeout, func() error { return s.checkIdentity(ctx) }); err != nil {
		return nil, s.fail(err)
	}
	// Again, now that this process holds the locks that show which name it uses: of two
	// processes opening the file under two names at once, the later sees the earlier, before
	// either writes anything.
	if err := checkOtherName(abs); err != nil {
		return nil, s.fail(err)
	}
	s.real = realPath(abs)
	if err := retryBusy(ctx, opt.BusyTimeout, func() error { return checkOldNames(ctx, s.r, abs, s.real) }); err != nil {
		return nil, s.fail(err)
	}
	if !opt.ReadOnly {
		// A new ledger (an empty file) gets its queue file only after its first page is on
		// disk (checkEmptied): its migration runs without the queue, as a writer that finds
		// no queue file does; the processes making it at once are served by SQLite's lock.
		fresh := false
		if fi, err := os.Stat(abs); err == nil && fi.Size() == 0 {
			fresh = true
			s.turns = &writerQueue{path: realPath(abs) + "-lock"}
		} else {
			s.turns = openWriterQueue(abs)
		}
		if s.w, err = sql.Open("sqlite", dsn(abs, opt, true)); err != nil {
			return nil, s.fail(err)
		}
		s.w.SetMaxOpenConns(1)
		s.w.SetMaxIdleConns(1)
		s.w.SetConnMaxLifetime(0)
		s.w.SetConnMaxIdleTime(0)
		// The migration is a write transaction (on every open): it takes its turn like an
		// Update, or a process starting while others write would starve in SQLite's busy
		// handler. A new ledger's has no queue to take a turn in yet (fresh, above).
		t := s.turns.enter(opt.BusyTimeout, ctx.Done())
		// Before anything is written on top of the log as read here (see syncLog).
		err := retryBusy(ctx, opt.BusyTimeout, func() error { return s.syncLog(ctx) })
		if err == nil {
			err = retryBusy(ctx, opt.BusyTimeout, func() error { return s.migrate(ctx) })
		}
		s.turns.leave(t)
		if err != nil {
			return nil, s.fail(err)
		}
		if fresh {
			if fi, err := os.Stat(abs); err != nil || fi.Size() == 0 {
				return nil, s.fail(fmt.Errorf("ledger %s: still empty after its schema was written (%v); nothing else was done", abs, err))
			}
			s.turns = openWriterQueue(abs)
		}
		if !opt.SkipQuickCheck {
			if err := retryBusy(ctx, opt.BusyTimeout, func() error { return s.quickCheck(ctx) }); err != nil {
				return nil, s.fail(err)
			}
		}
	}
	if err := retryBusy(ctx, opt.BusyTimeout, func() error { return s.checkVersion(ctx) }); err != nil {
		return nil, s.fail(err)
	}
	// A ledger that passed every check (a newer schema's, refused just above, is not written).
	if s.w != nil {
		if err := s.noteName(ctx); err != nil {
			return nil, s.fail(err)
		}
	}
	if opt.ReadOnly {
		err := retryBusy(ctx, opt.BusyTimeout, func() error {
			has, err := hasEventTokens(ctx, s.r)
			s.noEventTokens = !has
			return err
		})
		if err != nil {
			return nil, s.fail(err)
		}
	}
	s.rstmts = map[any]map[string]driver.Stmt{}
	err = retryBusy(ctx, opt.BusyTimeout, func() error {
		c, err := s.r.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Raw(func(dc any) error {
			_, err := s.readerRunner(ctx, dc)
			return err
		})
	})
	if err != nil {
		return nil, s.fail(err)
	}
	if s.w != nil {
		if s.wconn, err = s.w.Conn(ctx); err != nil {
			return nil, s.fail(err)
		}
		if err := retryBusy(ctx, opt.BusyTimeout, func() error { return s.prepareWriter(ctx) }); err != nil {
			return nil, s.fail(err)
		}
		// The file the path names now, which SQLite has open: see checkFile.
		if s.file, err = os.Stat(abs); err != nil {
			return nil, s.fail(err)
		}
		s.first = s.file
	}
	return s, nil
}

// writerQueries are prepared on the writer's connection: the fixed queries and the
// transaction control that tryBatch runs.
var writerQueries = append([]string{qBegin, qCommit, qRollback, qPutSplit, qPutArgs}, preparedQueries...)

// prepareWriter prepares writerQueries on the writer's driver connection.
func (s *Store) prepareWriter(ctx context.Context) error {
	return s.wconn.Raw(func(dc any) (err error) {
		s.wstmts, err = prepareOn(ctx, dc, writerQueries)
		return err
	})
}

// closeWriter closes the writer's statements, its connection and its pool.
func (s *Store) closeWriter() error {
	var errs []error
	if s.wconn != nil && !s.wlost {
		errs = append(errs, s.wconn.Raw(func(any) error {
			var errs []error
			for _, st := range s.wstmts {
				errs = append(errs, st.Close())
			}
			return errors.Join(errs...)
		}))
		errs = append(errs, s.wconn.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	s.turns.close()
	return errors.Join(errs...)
}

// Path is the absolute path of the ledger file.
func (s *Store) Path() string { return s.path }

// readerQueries are prepared on each reader connection.
var readerQueries = append([]string{qBeginRead, qRollback}, preparedQueries...)

// prepareOn prepares queries on a driver connection.
func prepareOn(ctx context.Context, dc any, queries []string) (map[string]driver.Stmt, error) {
	pc, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("sqlite ledger: the driver's connection (%T) cannot prepare statements", dc)
	}
	m := make(map[string]driver.Stmt, len(queries))
	for _, q := range queries {
		st, err := pc.PrepareContext(ctx, q)
		if err == nil {
			_, ok1 := st.(driver.StmtExecContext)
			_, ok2 := st.(driver.StmtQueryContext)
			if !ok1 || !ok2 {
				st.Close()
				err = fmt.Errorf("sqlite ledger: the driver's statements (%T) lack ExecContext or QueryContext", st)
			}
		}
		if err != nil {
			for _, st := range m {
				st.Close()
			}
			return nil, err
		}
		m[q] = st
	}
	return m, nil
}

// readerRunner returns a runner on the reader connection dc (inside its Raw callback), with
// the statements prepared on it, preparing them on its first use.
func (s *Store) readerRunner(ctx context.Context, dc any) (*rawRunner, error) {
	s.rmu.Lock()
	stmts := s.rstmts[dc]
	s.rmu.Unlock()
	if stmts == nil {
		var err error
		queries := readerQueries
		if s.noEventTokens {
			queries = slices.DeleteFunc(slices.Clone(queries), func(q string) bool { return q == qEvents || q == qEventsOf || q == qAppendEvent })
		}
		if stmts, err = prepareOn(ctx, dc, queries); err != nil {
			return nil, err
		}
		s.rmu.Lock()
		s.rstmts[dc] = stmts
		s.rmu.Unlock()
	}
	return &rawRunner{ctx: ctx, c: dc.(driver.Conn), stmts: stmts}, nil
}

// dropReader closes the statements of reader connection dc and forgets them.
func (s *Store) dropReader(dc any) error {
	s.rmu.Lock()
	stmts := s.rstmts[dc]
	delete(s.rstmts, dc)
	s.rmu.Unlock()
	var errs []error
	for _, st := range stmts {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// maxReaders is the size of the readers' pool.
const maxReaders = 4

// closeReaders closes the statements of every reader connection, then the readers' pool. No
// View runs any more, so the connections sit idle in the pool: taking as many connections as
// the pool holds reaches each of them.
func (s *Store) closeReaders() error {
	if s.r == nil {
		return nil
	}
	var errs []error
	var conns []*sql.Conn
	for len(conns) < maxReaders {
		s.rmu.Lock()
		left := len(s.rstmts)
		s.rmu.Unlock()
		if left == 0 {
			break
		}
		c, err := s.r.Conn(context.Background())
		if err != nil {
			errs = append(errs, err)
			break
		}
		conns = append(conns, c)
		errs = append(errs, c.Raw(func(dc any) error { return s.dropReader(dc) }))
	}
	for _, c := range conns {
		c.Close()
	}
	return errors.Join(append(errs, s.r.Close())...)
}

func (s *Store) fail(err error) error {
	s.closeWriter()
	s.closeReaders()
	s.closeFrozen()
	s.release()
	return s.wrap(err)
}

// retryBusy retries fn while it fails with SQLITE_BUSY, for up to limit. SQLite's busy
// handler does not cover every lock conflict: two processes opening a new ledger at once both
// switch it to WAL, and one of them gets SQLITE_BUSY at once (SQLite's deadlock avoidance
// when two connections holding SHARED both want EXCLUSIVE). Opening is the only place where
// that happens; it is safe to repeat because every step is idempotent.
func retryBusy(ctx context.Context, limit time.Duration, fn func() error) error {
	deadline := time.Now().Add(limit)
	wait := time.Millisecond
	for {
		err := fn()
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait + time.Duration(rand.Int64N(int64(wait)))):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// dsn builds the modernc.org/sqlite data source name. The writer's _txlock=immediate makes
// BeginTx issue BEGIN IMMEDIATE for the migration; Update's transactions issue it themselves
// (qBegin; TestUpdateBeginsImmediate checks what reaches SQLite). Only the writer sets
// the journal mode, because that pragma converts the file: it must not run before
// checkIdentity has confirmed, on a reader, that the file is ours. No connection creates the
// file (mode=rw): prepareFile has, 0600, before the first one opens, and connections open
// long after Open too (the writer's after a leader's goroutine ended inside its transaction, a
// reader's when more Views run at once): a ledger removed meanwhile must not come back as a
// new empty file with SQLite's default mode, which the next process would take for a new
// ledger.
func dsn(path string, opt Options, writer bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opt.BusyTimeout.Milliseconds()))
	if opt.vfs != "" {
		// The image of an AtRest store, immutable: SQLite takes no lock and looks for no log.
		q.Add("vfs", opt.vfs)
		q.Add("mode", "ro")
		q.Add("immutable", "1")
		return "file:" + frozenName + "?" + q.Encode()
	}
	if opt.ReadOnly {
		q.Add("mode", "ro")
	} else {
		q.Add("mode", "rw")
	}
	if writer {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
		// Keep the WAL file small after checkpoints, so the ledger's footprint stays bounded.
		q.Add("_pragma", "journal_size_limit(4194304)")
		// Deleted and rewritten content is overwritten with zeros, freed pages included: a
		// swept outcome (a card number in its arguments, a file in its result) does not stay
		// in the file's free pages (docs/privacy.md, TestSweptRecordsLeaveNoBytesInTheFile).
		// A freed page is written once more; a fresh call's claim and commit free none (their
		// WAL frames and writes were measured unchanged: docs/DECISIONS-sqlite.md).
		q.Add("_pragma", "secure_delete(1)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// maxPathBytes is the longest ledger path SQLite opens: its unix VFS's 512 bytes (MAX_PATHNAME)
// (Windows has a VFS and a limit of its own)
// less the "-journal" it appends to name a rollback journal.
const maxPathBytes = 512 - len("-journal")

// sqliteMagic opens every SQLite 3 database file.
const sqliteMagic = "SQLite format 3\x00"

// prepareFile creates the directory and an empty 0600 file when the ledger does not exist yet,
// and refuses files that are not SQLite databases before the driver touches them.
func prepareFile(path string, readOnly bool) error {
	// SQLite opens no path longer than this (its 512-byte limit less the "-journal" it may
	// add): a longer one failed as "cannot be opened … readable and writable" and left an
	// empty file behind. SQLite resolves links first, so the resolved path counts.
	if full := filepath.Join(realPath(filepath.Dir(path)), filepath.Base(path)); runtime.GOOS != "windows" && len(full) > maxPathBytes {
		return fmt.Errorf("ledger %s: its full path (%s) is %d bytes, and SQLite opens at most %d; choose a shorter path with --ledger or EFFECTFENCE_LEDGER (nothing was created)", path, full, len(full), maxPathBytes)
	}
	if err := checkBeside(path); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err == nil && fi.Size() == 0 || errors.Is(err, os.ErrNotExist) {
		if err := checkOrphanLog(path); err != nil {
			return err
		}
	}
	if err == nil && fi.Size() == 0 {
		if err := checkEmptied(path); err != nil {
			return err
		}
	}
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("ledger %s is a directory; name a file (e.g. %s)", path, filepath.Join(path, "ledger.db"))
	case err == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("ledger %s is %s, not a file; name a regular file with --ledger or EFFECTFENCE_LEDGER (memory is the ledger that keeps nothing)", path, irregular(fi.Mode()))
	case err == nil:
		if err := checkMountedAlone(path); err != nil {
			return err
		}
		if err := checkOneName(path, fi); err != nil {
			return err
		}
		if err := checkOtherName(path); err != nil {
			return err
		}
		if err := checkOwnLog(path); err != nil {
			return err
		}
		// A Store of this process that has the file open checked both when it opened it;
		// descriptors of our own, closed, would drop that Store's locks (here.go).
		_, err := aside(fi, func() error {
			if err := checkHeader(path, fi.Size()); err != nil {
				return err
			}
			if !readOnly {
				// SQLite silently opens an unwritable file read-only and fails only at the
				// first write; the fence must not start answering and then fail to record
				// a decision.
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					return unwritable(path, err)
				}
				f.Close()
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Before SQLite reads the log: it would drop what follows a damaged frame, and the
		// first write would overwrite the evidence.
		what, err := walDamage(path)
		if err != nil {
			return fmt.Errorf("ledger %s: %w", path, err)
		}
		if what != "" {
			return &FileError{Path: path, Problem: what}
		}
		// Before SQLite opens it too: the first connection rebuilds the index from what is
		// left of the log. A Store of this process that has the file open looked when it
		// opened it, and a descriptor of the index, closed, would drop its locks on it.
		var problem, advice string
		if fi.Size() > 0 {
			_, err = aside(fi, func() (err error) {
				problem, advice, err = walLost(path)
				return err
			})
		}
		if err != nil {
			return fmt.Errorf("ledger %s: %w", path, err)
		}
		if problem != "" {
			return &FileError{Path: path, Problem: problem, Advice: advice}
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("ledger %s: %w", path, err)
	case readOnly:
		return fmt.Errorf("ledger %s does not exist", path)
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		// Each new directory's entry synced too: a ledger in a directory a power cut took
		// away would forget every decision in it.
		if err := durabledir.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("cannot create the ledger directory %s: %w; choose another location with --ledger or EFFECTFENCE_LEDGER", dir, err)
		}
	}
	// A queue file left from a ledger that was here (removed to start afresh) would make the
	// new ledger's empty file look emptied to a process opening it now (checkEmptied): gone
	// before the file is made. Only the queue's own empty file is removed.
	if q := realPath(path) + "-lock"; ownQueueFileAt(q) {
		_ = os.Remove(q)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			return nil // another process created it first
		}
		// A link to a file that does not exist yet (O_EXCL refuses any link): create that
		// file through it, 0600 too, or SQLite would create it with its default mode.
		if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
			dir = filepath.Dir(realPath(path))
		}
	}
	if err != nil {
		return fmt.Errorf("cannot create the ledger file %s: %w; choose another location with --ledger or EFFECTFENCE_LEDGER", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	// Make the new directory entry durable too: a ledger whose file vanishes after a power
	// loss would forget every decision in it.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("ledger %s: syncing its directory: %w", path, err)
	}
	return nil
}

// checkOrphanLog refuses a ledger path with no ledger at it (no file, or an empty one) whose
// write-ahead log is not empty: the file was moved or deleted while a process had it open
// (that process still writes the log, and only the log holds its latest records). SQLite,
// opening an empty database beside a log, deletes the log: a new ledger here would destroy
// those records and leave the other process writing a log nobody reads, so each side would
// fence calls the other cannot see. A log is never there without its ledger otherwise: a new
// ledger's first page is written before its log exists.
func checkOrphanLog(path string) error {
	if problem, advice := OrphanLog(path); problem != "" {
		return &FileError{Path: path, Problem: problem + "; opening a new ledger here would delete them, so nothing was done", Advice: advice}
	}
	return nil
}

// checkBeside refuses a ledger whose write-ahead log or index name (<ledger>-wal,
// <ledger>-shm, beside the file a link leads to, where SQLite puts them) holds something other
// than a file: a named pipe, a device, a socket, a directory. SQLite waits on a pipe for
// ever (every open and `ledger check` hung) or fails with a bare "disk I/O error", which
// `ledger check` took for a damaged ledger and advised salvaging. Such a thing holds nothing
// of the ledger's: SQLite makes the log and the index as files.
func checkBeside(path string) error {
	real := realPath(path)
	for _, b := range []struct{ suffix, what string }{{"-wal", "write-ahead log"}, {"-shm", "index"}} {
		name := real + b.suffix
		fi, err := os.Stat(name)
		if err != nil || fi.Mode().IsRegular() {
			continue
		}
		kind := "a directory"
		if !fi.IsDir() {
			kind = irregular(fi.Mode())
		}
		return &FileError{Path: path,
			Problem: fmt.Sprintf("has %s where its %s belongs (%s), not a file: SQLite would wait on it for ever, or fail with an I/O error", kind, b.what, name),
			Advice:  fmt.Sprintf("move it out of the way (mv %[1]s %[1]s.aside): SQLite makes a ledger's %[2]s as a file, so this holds none of its records; the ledger file is not damaged; nothing was changed", name, b.what)}
	}
	return nil
}

// checkEmptied refuses an empty ledger file beside its writers' queue file (<ledger>-lock):
// a ledger was there, and the file was emptied since (truncated by a tool, a copy cut short,
// `: > ledger.db`). Taken for a new ledger, it would forget every outcome, and each done call
// would run again. The queue file is made only once a new ledger's first page is on disk
// (Open), and one left by a removed ledger is removed before a new file is made
// (prepareFile), so a queue file seen first and then an empty ledger, with the same queue
// file still there, means the ledger was emptied. An empty file without a queue file
// beside it becomes a ledger on first use, as before.
func checkEmptied(path string) error {
	q := realPath(path) + "-lock"
	before, err := os.Lstat(q)
	if err != nil || !ownQueueFile(before) {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 0 {
		return nil
	}
	if after, err := os.Lstat(q); err != nil || !os.SameFile(before, after) {
		return nil // replaced meanwhile: a new ledger is being made here
	}
	return &FileError{Path: path,
		Problem: fmt.Sprintf("is empty, but the writers' queue file beside it (%s) shows that a ledger was here: the file was emptied (truncated or overwritten), and every outcome it held is gone from it; taken for a new ledger, each call it recorded as done would run again, so nothing was done", q),
		Advice:  fmt.Sprintf("restore the ledger from a backup (with its -wal file, if one was kept); to start a new, empty ledger here on purpose, remove %s first", q)}
}

// Emptied returns the FileError of a ledger file at path emptied after use (checkEmptied), or
// nil. It changes nothing.
func Emptied(path string) error { return checkEmptied(path) }

// ownQueueFileAt reports whether path is a writers' queue file (ownQueueFile).
func ownQueueFileAt(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && ownQueueFile(fi)
}

// OrphanLog describes the non-empty write-ahead log beside path, which has no ledger (see
// checkOrphanLog), and the way out; "" when there is none. It changes nothing.
func OrphanLog(path string) (problem, advice string) {
	bases := []string{path}
	if real := realPath(path); real != path {
		bases = append(bases, real) // SQLite names the log after the file a link leads to
	}
	for _, base := range bases {
		log := base + "-wal"
		fi, err := os.Stat(log)
		if err != nil || fi.Size() == 0 {
			continue
		}
		if ok, _ := settled(log, fi); ok {
			// Its records are in the moved file already, which may have recorded more since:
			// moved beside it, the log would undo that (see checkOwnLog).
			return fmt.Sprintf("is missing (or empty) but an old write-ahead log is beside it (%s, %d bytes): the ledger file was moved away while a process had it open, and that process copied this log into the moved file (%s says so)", log, fi.Size(), settledMark(log)),
				fmt.Sprintf("stop every effectfence process that used this ledger; the moved file holds every record of this log: use it where it is, or put it back at %s; do not move this log beside it (it would undo what the moved file recorded since); to start a new ledger here, or if the file put back is refused, remove the old log with its index and mark (rm %s %s-shm %s)", path, log, base, settledMark(log))
		}
		return fmt.Sprintf("is missing (or empty) but its write-ahead log %s holds %d bytes: the ledger file was moved or deleted while a process had it open, and that log holds its latest records", log, fi.Size()),
			fmt.Sprintf("stop every effectfence process that used this ledger; then put the moved file back at %s (its log is applied on the next open), or, to start a new ledger here, move the log and its index beside the moved file under its new name (mv %s NEW-wal; mv %s-shm NEW-shm, where NEW is the moved file), so that it keeps its latest records", path, log, base)
	}
	return "", ""
}

// irregular names what a path that is neither a directory nor a regular file is. SQLite
// reads a device or a named pipe as an empty database (or fails with an I/O error), which is
// no ledger at all.
func irregular(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return "a special file (" + m.Type().String() + ")"
}

// checkHeader refuses a non-empty file that does not start with the SQLite header. An empty
// file is a ledger another process is about to initialise (or one that never was).
func checkHeader(path string, size int64) error {
	if size == 0 {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("ledger %s: %w", path, err)
	}
	defer f.Close()
	head := make([]byte, 100)
	n, _ := f.Read(head)
	if n < len(sqliteMagic) || string(head[:len(sqliteMagic)]) != sqliteMagic {
		return &FileError{Path: path, Problem: "is not a SQLite database (foreign file)"}
	}
	if n < 100 {
		return &FileError{Path: path, Problem: fmt.Sprintf("is truncated: %d bytes, shorter than the 100-byte SQLite header", size)}
	}
	return checkLength(f, path, head)
}

// checkLength refuses a file shorter than the pages its header counts when its write-ahead log
// does not hold the rest. SQLite reads the missing end of a page as zeros and quick_check
// passes when the cut is inside the last page: the first write then extends the file with
// those zeros, and the record that was there is unreadable while the file looks whole. The
// header's count is valid when its change counter matches version-valid-for. A checkpoint
// (of another process, or one a killed process left half done) writes page 1 before the
// pages past the old end, which its log holds; the header and the size are read again for a
// short while before a cut is believed. Before 2026-12-07 a file beside a non-empty log was
// not looked at, and one cut inside a page its log did not hold opened with that page's
// records unreadable.
func checkLength(f *os.File, path string, head []byte) error {
	var size, want int64
	for try := 0; ; try++ {
		if binary.BigEndian.Uint32(head[24:28]) != binary.BigEndian.Uint32(head[92:96]) {
			return nil
		}
		pageSize := int64(binary.BigEndian.Uint16(head[16:18]))
		if pageSize == 1 {
			pageSize = 65536
		}
		want = int64(binary.BigEndian.Uint32(head[28:32])) * pageSize
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("ledger %s: %w", path, err)
		}
		if size = fi.Size(); size >= want {
			return nil
		}
		held, err := logHolds(path+"-wal", size, pageSize, want/pageSize)
		if err != nil {
			return fmt.Errorf("ledger %s: %w", path, err)
		}
		if held {
			return nil
		}
		if try == 20 {
			break
		}
		time.Sleep(10 * time.Millisecond)
		if _, err := f.ReadAt(head, 0); err != nil {
			return fmt.Errorf("ledger %s: %w", path, err)
		}
	}
	return &FileError{Path: path, Problem: fmt.Sprintf("is truncated: %d bytes, its header counts %d bytes of pages, and its write-ahead log does not hold the pages missing", size, want)}
}

// logHolds reports whether the write-ahead log at path holds, in the transactions SQLite would
// apply, every page of pageSize bytes from the first one a file of size bytes lacks (whole or
// in part) to page count, or to the database's size after the log's last commit if that is
// smaller.
func logHolds(path string, size, pageSize int64, count int64) (bool, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pages := map[uint32]bool{}
	_, _, headerOK, dbPages, err := walCommitted(f, fi.Size(), pages)
	if err != nil || !headerOK {
		return false, err
	}
	if dbPages > 0 && int64(dbPages) < count {
		count = int64(dbPages)
	}
	for p := size/pageSize + 1; p <= count; p++ {
		if !pages[uint32(p)] {
			return false, nil
		}
	}
	return true, nil
}

// FileError reports a ledger file this build cannot use, and the way out.
type FileError struct {
	Path    string
	Problem string
	Advice  string // the way out, when it is not the usual one (check it, move it aside)
}

func (e *FileError) Error() string {
	if e.Advice != "" {
		return fmt.Sprintf("ledger %s %s; %s", e.Path, e.Problem, e.Advice)
	}
	return fmt.Sprintf("ledger %s %s; run `effectfence ledger check --ledger %s` for details; nothing was changed (move the file aside to start a new ledger)", e.Path, e.Problem, e.Path)
}

// wrap turns driver errors that mean a damaged or foreign file into a FileError and adds the
// path to the rest.
func (s *Store) wrap(err error) error {
	if err == nil {
		return nil
	}
	var fe *FileError
	if errors.As(err, &fe) || errors.Is(err, ErrDiskFailsWrites) { // the latter names the ledger and the cause
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CORRUPT:
			return &FileError{Path: s.path, Problem: "is corrupt (" + se.Error() + ")"}
		case sqlite3.SQLITE_NOTADB:
			return &FileError{Path: s.path, Problem: "is not a SQLite database (" + se.Error() + ")"}
		case sqlite3.SQLITE_READONLY:
			if side := unwritableBeside(s.path); side != "" {
				// Not the ledger: a new file in its place would be an empty ledger, which
				// replays nothing.
				return fmt.Errorf("ledger %s is writable, but %s beside it is not (%v): SQLite makes a ledger's write-ahead log and index with the permissions the file had, and a read-only open of it while it was read-only (`effectfence ledger check`) leaves them so; make it writable (chmod u+w %s), as the user every process on the ledger runs as; keep using this ledger, not another file, which would replay nothing it recorded", s.path, side, se, side)
			}
			if cause := diskTrouble(s.path, false); cause != "" {
				return fmt.Errorf("ledger %s: %s: %w", s.path, cause, err)
			}
			return fmt.Errorf("ledger %s is read-only for this process (%v): make it writable again (its permissions and attributes, as the user every process on the ledger runs as); keep using this ledger, not another file, which would be a new, empty ledger under which every call this one recorded would run again", s.path, se)
		case sqlite3.SQLITE_CANTOPEN:
			return fmt.Errorf("ledger %s cannot be opened (%v); check that the file and its directory are readable and writable by this user", s.path, se)
		case sqlite3.SQLITE_BUSY:
			// The transaction never began: SQLite gave up waiting for the lock.
			return fmt.Errorf("ledger %s: another process held it locked longer than the busy timeout (%v): a process stopped inside a transaction (SIGSTOP, a debugger, a frozen container) or a tool keeping one open (the sqlite3 shell after BEGIN); nothing was changed, try again once it lets go (%w)", s.path, s.opt.BusyTimeout, err)
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
			if se.Code() == sqlite3.SQLITE_IOERR_SHORT_READ {
				return &FileError{Path: s.path, Problem: "is truncated (" + se.Error() + ")"}
			}
			// SQLite says "disk I/O error" whatever the kernel said: name what the disk shows.
			if cause := diskTrouble(s.path, se.Code()&0xff == sqlite3.SQLITE_FULL); cause != "" {
				return fmt.Errorf("ledger %s: %s: %w", s.path, cause, err)
			}
			if se.Code() == sqlite3.SQLITE_IOERR_FSYNC {
				return fmt.Errorf("ledger %s: the disk failed to make a write durable (fsync failed: a disk or network storage error; the kernel's log says, `dmesg`): %w", s.path, err)
			}
		}
	}
	return fmt.Errorf("ledger %s: %w", s.path, err)
}

// unwritable is the refusal of a ledger file at path that opening to write failed with err,
// saying why by its cause. It never advises another file: that would be a new, empty ledger,
// under which every call this one recorded would run again. Before 2026-12-07 it called
// every such file "not writable by this user" and advised choosing another file, also for a
// file system remounted read-only after an error on its disk, which no permission fixes
// (TestLedgerOnAFileSystemTurnedReadOnly).
func unwritable(path string, err error) error {
	const keep = "the fence must record every decision; keep using this ledger once it is writable again, not another file, which would be a new, empty ledger under which every call this one recorded would run again (`effectfence ledger check` can still read it)"
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("ledger %s is on a read-only file system (%w): mounted read-only, or remounted so after an error on its disk (ext4's errors=remount-ro; the kernel's log says, `dmesg`); check and repair the disk and mount it read-write again; %s", path, err, keep)
	case errors.Is(err, syscall.EPERM):
		return fmt.Errorf("ledger %s cannot be opened to write, not even by its owner (%w): an immutable or append-only file (`lsattr` shows the i or a attribute; `chattr -i -a` clears them); %s", path, err, keep)
	}
	return fmt.Errorf("ledger %s is not writable by this user (%w): fix its permissions, or run as the user that owns it; %s", path, err, keep)
}

// checkIdentity refuses SQLite files that hold something other than an effectfence ledger. It
// reads the mark and the schema in one snapshot: another process may be creating the ledger
// at this very moment, and must be seen either before or after, never half-way.
func (s *Store) checkIdentity(ctx context.Context) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var tables int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&tables); err != nil {
		return err
	}
	var appID int64
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return err
	}
	if appID == applicationID {
		return nil
	}
	if appID != 0 {
		return &FileError{Path: s.path, Problem: fmt.Sprintf("is a SQLite database of another application (application_id %#x), not an effectfence ledger", appID)}
	}
	if tables > 0 {
		return &FileError{Path: s.path, Problem: "is a SQLite database of another application (it has tables but no effectfence mark), not an effectfence ledger"}
	}
	if s.opt.ReadOnly {
		return &FileError{Path: s.path, Problem: "is an empty SQLite file, not yet an effectfence ledger"}
	}
	if s.opt.Existing {
		// Made a ledger, it would be read as one with nothing fenced, whatever was meant to
		// be there (TestLookAtAnEmptySQLiteDatabaseCreatesNoLedger).
		return errors.New("no ledger here: the file is an empty SQLite database (no table, no effectfence mark), which nothing has used as a ledger (check --ledger, EFFECTFENCE_LEDGER or --for); nothing was changed")
	}
	return nil
}

// migrate creates or upgrades the schema inside one IMMEDIATE transaction, so processes
// opening a new ledger at the same time do it once.
func (s *Store) migrate(ctx context.Context) (err error) {
	// A migration copies the records and drops what it copied from (schema 1 to 2), or drops
	// an index it builds again: the pages it frees hold nothing the ledger does not still hold,
	// and zeroing them (secure_delete, dsn) wrote a migrated 23 MB ledger's old table again:
	// 87 MB written and 267 ms, against 15 MB and 85 ms (TestMigrationWritesNoZeroedPages).
	// The writer's only connection runs this, the transaction and the statement after it.
	if _, err := s.w.ExecContext(ctx, "PRAGMA secure_delete = 0"); err != nil {
		return err
	}
	defer func() {
		if _, rerr := s.w.ExecContext(context.WithoutCancel(ctx), "PRAGMA secure_delete = 1"); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restoring secure_delete after the migration: %w", rerr))
		}
	}()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	v, err := schemaVersion(ctx, tx)
	if err != nil {
		return err
	}
	if v > SchemaVersion {
		return nil // refused by the caller's version check
	}
	if v < SchemaVersion {
		for ; v < SchemaVersion; v++ {
			if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrating the ledger schema from version %d: %w", v, err)
			}
			if testHookMigrated != nil {
				testHookMigrated(v)
			}
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO meta(key, value) VALUES ('schema_version', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", SchemaVersion); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", applicationID)); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, recordIndexes); err != nil {
		return fmt.Errorf("setting the records table's indexes: %w", err)
	}
	if has, err := hasEventTokens(ctx, tx); err != nil {
		return err
	} else if !has {
		if _, err := tx.ExecContext(ctx, eventTokens); err != nil {
			return fmt.Errorf("adding the events table's token column: %w", err)
		}
	}
	return tx.Commit()
}

// testHookMigrated, when set (by tests only), runs after each migration step, before the
// transaction commits: the crash tests kill the process there.
var testHookMigrated func(from int)

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// schemaVersion reads the schema version from meta; 0 for a ledger not yet initialised.
func schemaVersion(ctx context.Context, q querier) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta'").Scan(&n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	var v int
	err := q.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'schema_version'").Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err == nil && v < 1 {
		// Only SchemaVersion is ever written there: the row was edited or damaged. Taken for
		// an old ledger, it indexed the migrations (-1 panicked) or ran the first over a
		// ledger that has its tables.
		return 0, fmt.Errorf("its meta table records schema version %d, which no effectfence ledger has (edited or damaged); nothing was changed", v)
	}
	return v, err
}

func (s *Store) checkVersion(ctx context.Context) error {
	v, err := schemaVersion(ctx, s.r)
	if err != nil {
		return err
	}
	switch {
	case v > SchemaVersion:
		return &FileError{Path: s.path, Problem: fmt.Sprintf("has schema version %d, newer than this build's %d (upgrade effectfence)", v, SchemaVersion),
			// Not damaged: moving it aside would lose every receipt it holds.
			Advice: fmt.Sprintf("run `effectfence ledger check --ledger %s` for details; nothing was changed (do not move it aside: a new ledger would not replay what it recorded)", s.path)}
	case v < oldestReadable || (v < SchemaVersion && !s.opt.ReadOnly):
		return &FileError{Path: s.path, Problem: fmt.Sprintf("has schema version %d, which this build (schema %d) reads only after migrating it, and a read-only open does not migrate: open it once for writing (any effectfence command that records decisions, e.g. wrap or serve) to upgrade it in place", v, SchemaVersion)}
	}
	return nil
}

// Update runs fn in a write transaction (see the package doc for batching).
func (s *Store) Update(ctx context.Context, fn func(fence.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	if s.opt.ReadOnly {
		s.mu.RUnlock()
		return fmt.Errorf("ledger %s was opened read-only", s.path)
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	defer s.inflight.Done()
	u := &update{ctx: ctx, fn: fn, res: make(chan answer, 1)}
	s.qmu.Lock()
	s.queue = append(s.queue, u)
	if !s.leading {
		s.leading = true
		u.handed = true
		s.qmu.Unlock()
		s.lead()
	} else {
		s.qmu.Unlock()
	}
	// Once taken into a batch, an Update is always answered, and the answer must be awaited:
	// returning early on cancellation could report failure for a write that commits. Until
	// then (it waits in the queue while a leader waits for the lock or commits) its caller
	// may give up: it leaves the queue, its function never runs.
	done := ctx.Done()
	for {
		var a answer
		select {
		case a = <-u.res:
		case <-done:
			if s.withdraw(u) {
				return ctx.Err()
			}
			done = nil // taken, or handed the lead: its answer comes
			continue
		}
		if !a.lead {
			return a.err
		}
		s.lead()
	}
}

// withdraw takes u out of the queue if it still waits there, not yet taken into a batch nor
// handed the lead, and reports whether it did.
func (s *Store) withdraw(u *update) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if u.handed {
		return false
	}
	if i := slices.Index(s.queue, u); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		return true
	}
	return false
}

// lead runs one batch on the calling goroutine, whose Update is at the front of the queue,
// then hands the lead to the first Update still waiting (or ends it when none is). A lone
// Update thus runs its own transaction with no hand-off to another goroutine; Updates that
// arrive while a transaction commits wait and go together in the next one.
//
// The leader waits for the write lock under its own Update's context, the others waiting
// behind it in the queue (each may leave it when its context ends: Update). Once it holds
// the lock, it takes the batch from the front of the queue, its own Update first. A leader
// whose context ends while it waits gives up alone (its function never ran) and hands the
// lead on: the next Update waits under its own context. So no caller waits for another
// process's lock, up to the busy timeout twice (the writers' queue, then SQLite's busy
// handler), once it has given up: serve's 2 s bound on an outcome, an agent that cancels.
//
// The lead is handed on (or ended) in a deferred call, so that it goes on even when the
// leader's goroutine does not come back from runBatch: a function of the batch may end it
// (runtime.Goexit, which t.FailNow calls) or something outside the functions may panic (see
// runBatch). Otherwise every later Update of the store would wait for ever for a leader.
func (s *Store) lead() {
	defer s.handOn()
	s.runBatch()
}

// handOn ends a leader's turn: the lead goes to the first Update still waiting, or ends.
func (s *Store) handOn() {
	s.qmu.Lock()
	if len(s.queue) == 0 {
		s.queue = nil
		s.leading = false
		s.qmu.Unlock()
		return
	}
	next := s.queue[0]
	next.handed = true
	s.qmu.Unlock()
	next.res <- answer{lead: true}
}

// batch is what a leader runs: its own Update, then those taken from the queue behind it.
type batch struct {
	lead  *update   // the leader's Update: the front of the queue until the batch is taken
	us    []*update // the batch, once taken (the lock is held, or waiting for it failed)
	errs  []error   // each function's own error, as us
	taken bool
	one   [1]error // errs of a batch of one, which most are: no allocation
}

// take takes the batch from the front of the queue, the leader's Update first (unless it
// was taken already).
func (s *Store) take(b *batch) {
	if b.taken {
		return
	}
	s.qmu.Lock()
	n := min(len(s.queue), s.opt.MaxBatch)
	b.us = s.queue[:n:n]
	s.queue = s.queue[n:]
	s.qmu.Unlock()
	if n == 1 {
		b.errs = b.one[:]
	} else {
		b.errs = make([]error, n)
	}
	b.taken = true
}

// giveUpLead takes the leader's Update alone out of the queue, answered with its context's
// error (it ended while the leader waited for the lock): the batch is empty, and the lead
// goes on to the Updates behind it.
func (s *Store) giveUpLead(b *batch) {
	s.qmu.Lock()
	s.queue = s.queue[1:]
	s.qmu.Unlock()
	b.us, b.errs, b.taken = nil, nil, true
	b.lead.res <- answer{err: b.lead.ctx.Err()}
}

// runBatch runs the functions of a batch in one transaction and answers every caller after
// the commit. Optimistically it runs them without savepoints, which costs nothing extra; if
// any function fails (an error or a panic), it rolls the whole transaction back and runs the
// batch again with each function in its own savepoint, so that only the failing ones are
// undone. A function may therefore run twice; every caller gets the result of the run that
// committed, which fence.Store allows ("a store may run fn more than once").
//
// The leader may not come back from a batch. A function may end the goroutine (runtime.Goexit:
// call cannot recover it), and its caller is not always the leader: the leader runs every
// function of its batch, so another caller's goroutine ends. Something outside the functions
// may panic too (the driver, the writers' queue). Then the deferred call below does what the
// leader would have: by the time it runs, the transaction has been rolled back (tryBatchOn's
// and tryBatch's deferred calls, deeper, run first); it answers every caller of the batch
// (taking it first, if the leader had not yet), with an error that says why (the result of
// the transaction if it had already ended), and leaves the writers' queue, which other
// processes would otherwise wait for until their busy timeout; lead's deferred call hands the
// lead on. A panic is then raised again on the leader's goroutine, as without the store in
// between: it is a bug (or an exhausted runtime), which must not be turned into an error of
// one Update and forgotten, and the program has been left able to go on if the caller
// recovers it. Re-raised from the deferred call, it unwinds from where it began, whose frames
// the crash report still shows.
func (s *Store) runBatch() {
	b := &s.batch // one leader at a time: its batch is the store's
	s.qmu.Lock()
	*b = batch{lead: s.queue[0]}
	s.qmu.Unlock()
	var t turn
	var err error
	ended, answered := false, false
	defer func() {
		if answered {
			return
		}
		p := recover()
		s.take(b)
		if !ended {
			err = leaderExit(p)
			clear(b.errs)
		}
		s.answer(b.us, b.errs, err)
		s.turns.leave(t) // again, if leaving panicked: unlocking twice is harmless
		if p != nil {
			panic(p)
		}
	}()
	t = s.turns.enter(s.opt.BusyTimeout, b.lead.ctx.Done())
	failed, err := s.tryBatch(b, false)
	if failed {
		clear(b.errs)
		_, err = s.tryBatch(b, true)
	}
	ended = true
	s.turns.leave(t)
	answered = true
	s.answer(b.us, b.errs, err)
}

// answer gives every caller of a batch its result: its function's error, else the
// transaction's.
func (s *Store) answer(batch []*update, errs []error, err error) {
	for i, u := range batch {
		if errs[i] == nil {
			errs[i] = err
		}
		u.res <- answer{err: errs[i]}
	}
}

// leaderExit is the error of the callers of a batch whose leader did not come back from it:
// p is what it panicked with, nil when a function ended its goroutine.
func leaderExit(p any) error {
	if p == nil {
		return errors.New("sqlite ledger: a transaction function of this Update's batch exited the goroutine (runtime.Goexit); the transaction was rolled back, nothing was written")
	}
	return fmt.Errorf("sqlite ledger: the writer panicked outside the transaction functions (%v); the transaction was rolled back, unless the panic came from its COMMIT, whose outcome is then unknown", p)
}

// tryBatch runs the batch in one transaction. Without savepoints it stops at the first
// failing function, rolls back and reports failed; with savepoints it rolls back each failing
// function alone and commits the rest. errs receives each function's own error; the returned
// error is the transaction's (begin, savepoint or commit), shared by every function that
// succeeded.
//
// When the callback does not return (runtime.Goexit in a function, a panic), database/sql
// closes the connection (Raw's contract). The statements prepared on it are closed first:
// with any left, sqlite3_close_v2 would keep the connection open as a zombie, with its
// descriptors and whatever transaction tryBatchOn's ROLLBACK could not end; really closed,
// SQLite rolls such a transaction back. The next batch takes a new connection.
func (s *Store) tryBatch(b *batch, savepoints bool) (failed bool, err error) {
	if s.wlost {
		if err := s.reconnectWriter(); err != nil {
			s.take(b)
			return false, s.wrap(err)
		}
	}
	same, err := s.checkFile()
	if err != nil {
		s.take(b)
		return false, err
	}
	err = s.wconn.Raw(func(dc any) error {
		returned := false
		defer func() {
			if !returned {
				s.dropWriterStmts()
			}
		}()
		var err error
		failed, err = s.tryBatchOn(&rawRunner{ctx: context.Background(), c: dc.(driver.Conn), stmts: s.wstmts}, b, savepoints, same)
		returned = true
		return err
	})
	s.take(b) // the connection failed before the transaction could begin
	return failed, s.wrap(err)
}

// checkFile refuses every write while the ledger's path does not name the file this store
// has open: it was moved, replaced or deleted while in use. Another process opening the path
// would not see what this one records (and would find no ledger there: see checkOrphanLog),
// and a deleted file's records end with this process. The first time, it copies the ledger
// as this process sees it, write-ahead log included, to a new file beside the path (VACUUM
// INTO), so that every receipt it holds survives whatever became of the file, and the error
// names the copy. Once the file is back at the path, writes go on. A stat that fails
// otherwise (permissions, I/O) tells nothing: writes go on. same: the path was seen to name
// the file (the transaction then checks the index, tryBatchOn).
func (s *Store) checkFile() (same bool, err error) {
	if s.shmGone != nil {
		return false, s.shmGone
	}
	what, gone, same := s.fileAt()
	if !gone {
		s.gone = nil
		return same, nil
	}
	if s.gone != nil {
		return false, s.gone
	}
	copyTo := fmt.Sprintf("%s.rescued-%d-%s", s.path, os.Getpid(), time.Now().UTC().Format("20060102T150405Z"))
	// The copy holds what the ledger holds: created 0600 here, empty (VACUUM INTO fills an
	// empty file), since SQLite would create it with its default mode (0644 under the usual
	// umask), readable by every user beside a ledger in a shared directory.
	cerr := createPrivate(copyTo)
	remade := ""
	if errors.Is(cerr, os.ErrNotExist) {
		// The ledger's directory is gone with it (rm -r), and the file lives only in this
		// process's descriptors: the copy makes the directory again, only its user's, so the
		// receipts outlive the process where the advice says. Before 2026-12-07 the copy
		// failed, the advice was to put back a file that no longer existed, and a wrap started
		// once the directory was made again ran every recorded call again
		// (TestLedgerDirectoryRemovedUnderWrapKeepsItsReceipts).
		if err := os.MkdirAll(filepath.Dir(copyTo), 0o700); err == nil {
			cerr = createPrivate(copyTo)
			remade = " (its directory was gone, and was made again for it)"
		}
	}
	if cerr == nil {
		cerr = s.wconn.Raw(func(dc any) error {
			r := &rawRunner{ctx: context.Background(), c: dc.(driver.Conn), stmts: s.wstmts}
			_, err := r.exec("VACUUM INTO ?", copyTo)
			if r.checkpointPassive() {
				markSettled(s.real, s.file)
			}
			return err
		})
		if cerr != nil {
			os.Remove(copyTo) // not a copy: nothing to point the operator at
		}
	}
	advice := fmt.Sprintf("every receipt this process holds was copied to %s%s. Put the ledger back at the path, or stop this process and use the copy as the ledger (mv %s %s), moving aside whatever is at the path first with its -wal and -shm files", copyTo, remade, copyTo, s.path)
	if cerr != nil {
		advice = fmt.Sprintf("copying what this process holds to %s failed too (%v). Put the ledger back at the path", copyTo, cerr)
	}
	s.gone = &FileError{Path: s.path, Problem: "is not the file this process opened: it was moved, replaced or deleted while in use (the path " + what + "), so other processes would not see what this one records",
		Advice: "this process records nothing more until the file is back at the path; " + advice}
	return false, s.gone
}

// createPrivate creates path as an empty file only its user can read and write; it fails if
// anything is at path.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// checkIndex refuses every write once the shared-memory index beside the ledger
// (<ledger>-shm) is not the one this process opened: it was deleted or replaced while in use.
// The index tells every process which frames of the log hold which pages; a process opening
// the ledger after the removal builds a new index that this process does not see, and writes
// through two indexes overwrite each other's frames: the ledger is corrupted and committed
// decisions are lost. This process stops writing for good (its index cannot come back); the
// file and the log stay whole for the processes that use the new index.
//
// It runs only once the path was seen to name the file this store has open (checkFile), and
// inside a transaction of the writer's (tryBatchOn), where the writer's connection maps the
// index, so that no connection of this process can close the index while the watch looks.
// The watch's descriptor may still be out of date: SQLite closed it (and deleted the index)
// when all this process's connections had closed, and the number and the inode number went
// to another file. indexWatch.removed therefore trusts a removal only from a file born when
// the index was, and otherwise looks at the descriptors' names
// (TestIndexWatchSeesItsDescriptorReusedWithTheIndexInode, TestIndexWatchSeesTheIndexMovedAway).
func (s *Store) checkIndex() error {
	// Only while that file is the one Open opened: a file moved or deleted with its index is
	// checkFile's (its records are rescued), and a file put back in its place has an index of
	// its own (the one this process still maps is the first file's).
	if s.shmGone == nil && s.first != nil && os.SameFile(s.file, s.first) {
		if s.index.removed(s.real) {
			s.shmGone = &FileError{Path: s.path, Problem: "lost its shared-memory index while this process used it (" + s.real + "-shm was deleted or replaced), so processes that open the ledger now would not see what this one records, and writes through two indexes corrupt the ledger",
				Advice: "this process records nothing more; restart every effectfence process that had the ledger open before the index was removed, and never remove a ledger's -shm or -wal file while a process uses it"}
		}
	}
	return s.shmGone
}

// fileGone says whether the ledger's path no longer names the file this store has open, and
// what it names instead. A stat that fails otherwise (permissions, I/O) tells nothing: not
// gone.
func (s *Store) fileGone() (what string, gone bool) {
	what, gone, _ = s.fileAt()
	return what, gone
}

// fileAt is fileGone, and same: the path was seen to name the file this store has open.
func (s *Store) fileAt() (what string, gone, same bool) {
	if s.file == nil {
		return "", false, false
	}
	fi, err := os.Stat(s.path)
	switch {
	case err == nil && os.SameFile(fi, s.file):
		return "", false, true
	case err == nil:
		return "names another file now", true, false
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return "names no file now", true, false
	}
	return "", false, false
}

// checkpointPassive copies the write-ahead log's records into the ledger file, wherever the
// file is now. SQLite does not when it closes a file that moved (it leaves the log beside the
// old name), so a moved file would lack them for good, and a process opening it under its new
// name would answer their duplicates as new calls. PASSIVE leaves the log as it is, so the
// old path still refuses a new ledger beside it (checkOrphanLog). Best effort: checkFile's
// copy is the receipts' safety.
func (r *rawRunner) checkpointPassive() (complete bool) {
	rows, err := r.query("PRAGMA wal_checkpoint(PASSIVE)")
	if err != nil {
		return false
	}
	defer rows.Close()
	var busy, log, done int64
	return rows.Next() && rows.Scan(&busy, &log, &done) == nil && busy == 0 && log >= 0 && done == log
}

// settleMoved, at Close, copies the log's records into a ledger file that moved while this
// store had it open (see checkpointPassive), whether or not a write noticed it.
func (s *Store) settleMoved() {
	if s.wconn == nil || s.wlost {
		return
	}
	if _, gone := s.fileGone(); !gone {
		return
	}
	_ = s.wconn.Raw(func(dc any) error {
		if (&rawRunner{ctx: context.Background(), c: dc.(driver.Conn), stmts: s.wstmts}).checkpointPassive() {
			markSettled(s.real, s.file)
		}
		return nil
	})
}

// dropWriterStmts closes the writer's statements (inside its Raw callback), before
// database/sql discards the connection, and marks it lost.
func (s *Store) dropWriterStmts() {
	s.wlost = true
	stmts := s.wstmts
	s.wstmts = nil
	for _, st := range stmts {
		st.Close()
	}
}

// reconnectWriter replaces a writer connection that database/sql discarded.
func (s *Store) reconnectWriter() error {
	ctx := context.Background()
	c, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	s.wconn = c
	if err := s.prepareWriter(ctx); err != nil {
		c.Close() // back to the pool; the next batch tries again
		return err
	}
	s.wlost = false
	// The new connection opened whatever file the path names now: checkFile compares with it.
	if fi, err := os.Stat(s.path); err == nil {
		s.file = fi
	}
	return nil
}

// tryBatchOn is tryBatch on the writer's driver connection. The transaction is the store's,
// not any caller's: one caller's cancellation must not abort the others' writes, so no
// statement watches a context.
//
// With index set (checkFile saw the path name the file Open opened), the transaction checks
// the shared-memory index once it has begun (checkIndex).
func (s *Store) tryBatchOn(r *rawRunner, b *batch, savepoints, index bool) (failed bool, err error) {
	// Until the batch is taken, BEGIN waits for the lock under the leader's context (lead);
	// the rest of the transaction belongs to the store and watches no context.
	begin := rawRunner{ctx: context.Background(), c: r.c, stmts: r.stmts}
	if !b.taken {
		begin.ctx = b.lead.ctx
	}
	// On a frozen file system, wait in a system call, not in a page fault (waitWritable).
	s.turns.waitWritable()
	_, err = begin.exec(qBegin)
	if err != nil && !b.taken && b.lead.ctx.Err() != nil {
		s.giveUpLead(b)
		return false, nil
	}
	if err != nil && strings.Contains(err.Error(), "within a transaction") {
		// A transaction an earlier batch could not end (its ROLLBACK failed) is still open on
		// the writer. Every caller of that batch was told it failed: end it, and begin again,
		// rather than failing every later batch.
		r.exec(qRollback)
		_, err = begin.exec(qBegin)
		if err != nil && !b.taken && b.lead.ctx.Err() != nil {
			s.giveUpLead(b)
			return false, nil
		}
	}
	s.take(b)
	if err != nil {
		return false, err
	}
	batch, errs := b.us, b.errs
	done := false
	defer func() {
		if !done {
			r.exec(qRollback)
		}
	}()
	if index {
		if err := s.checkIndex(); err != nil {
			return false, err
		}
	}
	// While a failed COMMIT's frames may still count (ClaimInDoubt): the rows changed before
	// the batch, to tell whether its COMMIT writes over them.
	doubt := s.unsettled.Load()
	var before int64
	if doubt {
		before, doubt = totalChanges(r)
	}
	ok := 0
	var meta bool // shared by the batch's transactions (txn.meta)
	for i, u := range batch {
		if err := u.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		t := &txn{s: s, r: r, now: s.opt.Now(), write: true, meta: &meta}
		if savepoints {
			if _, err := r.exec(qSavepoint); err != nil {
				return false, err
			}
		}
		errs[i] = call(u.fn, t)
		if errs[i] != nil && !savepoints && len(batch) > 1 {
			return true, nil
		}
		if errs[i] == nil {
			ok++
		} else if savepoints {
			if _, err := r.exec(qRollbackTo); err != nil {
				return false, err
			}
		}
		if savepoints {
			if _, err := r.exec(qRelease); err != nil {
				return false, err
			}
		}
	}
	if ok == 0 {
		return false, nil
	}
	if testHookBeforeCommit != nil {
		testHookBeforeCommit()
	}
	done = true
	// A COMMIT that changes a row writes over a failed one's frames. A batch with a function
	// rolled back to its savepoint may have changed rows only there, so it settles nothing.
	settles := doubt && ok == len(batch)
	if _, err := r.exec(qCommit); err != nil {
		s.unsettled.Store(true)
		// A COMMIT that failed may leave the transaction open (SQLITE_BUSY); end it, as
		// database/sql would, so the connection is clean for the next batch. When SQLite has
		// already rolled it back, this ROLLBACK fails harmlessly.
		r.exec(qRollback)
		return false, err
	}
	if settles {
		if after, read := totalChanges(r); read && after > before {
			s.unsettled.Store(false)
		}
	}
	return false, nil
}

// totalChanges is the rows the writer's connection has inserted, updated or deleted since it
// opened (SQLite's total_changes()), and whether it could be read.
func totalChanges(r *rawRunner) (int64, bool) {
	rows, err := r.query("SELECT total_changes()")
	if err != nil {
		return 0, false
	}
	defer rows.Close()
	var n int64
	if !rows.Next() || rows.Scan(&n) != nil {
		return 0, false
	}
	return n, true
}

// testHookBeforeCommit, when set (by tests only), runs on the leader's goroutine before each
// batch's COMMIT, outside the functions: a test panics there, as a driver might.
var testHookBeforeCommit func()

// call runs fn and turns a panic into an error for its caller alone, so that one bad function
// cannot take the leader (and every other caller's transaction) down with it.
func call(fn func(fence.Tx) error, t fence.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sqlite ledger: transaction function panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(t)
}

// WriteFirst (fence.WriteFirst): the engine skips its read-only pass for an intent it has not
// seen recorded and lets the write transaction decide. A first attempt must write anyway, so
// the read transaction it saves was pure cost; an Update that ends up writing nothing (a
// replay or a refusal for an intent another process recorded) holds the write lock for its
// reads but appends nothing to the WAL, so its COMMIT does not fsync. A retry of an intent
// this engine has seen still takes the read-only pass on a reader connection.
func (s *Store) WriteFirst() bool { return true }

// View runs fn on a read snapshot.
func (s *Store) View(ctx context.Context, fn func(fence.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	defer s.inflight.Done()
	c, err := s.r.Conn(ctx)
	if err != nil {
		return s.wrap(err)
	}
	defer c.Close()
	var ferr error
	discarded := false // the function discarded the connection itself; ferr says how it went
	err = c.Raw(func(dc any) (rerr error) {
		r, err := s.readerRunner(ctx, dc)
		if err != nil {
			return err
		}
		// A read takes a read mark in the shared-memory index, a store into the mapped -shm
		// file that, on a frozen file system, waits in a page fault where the whole process
		// would stop at the next collection (waitWritable): wait in a system call first.
		s.turns.waitWritable()
		if _, err := r.exec(qBeginRead); err != nil {
			// The driver answers with the context's error when the context ended while the
			// statement ran, even if BEGIN took effect. The connection may then hold an open
			// transaction: every later View on it would fail ("cannot start a transaction
			// within a transaction") and its snapshot would keep the write-ahead log from
			// being checkpointed. It is discarded (ErrBadConn), and the caller gets err.
			s.dropReader(dc)
			ferr, discarded = s.wrap(err), true
			return driver.ErrBadConn
		}
		ended := false
		defer func() {
			// ROLLBACK ends the read transaction whatever fn did; it does not watch ctx, which
			// may be done by now. A panic in fn makes database/sql discard the connection:
			// its statements go with it. A ROLLBACK that fails may leave the transaction
			// open: the connection is discarded.
			_, rbErr := (&rawRunner{ctx: context.Background(), c: r.c, stmts: r.stmts}).exec(qRollback)
			if !ended || rbErr != nil {
				s.dropReader(dc)
			}
			if ended && rbErr != nil {
				rerr, discarded = driver.ErrBadConn, true
			}
		}()
		ferr = fn(&txn{s: s, r: r, now: s.opt.Now()})
		ended = true
		return nil
	})
	if err != nil && !discarded {
		return s.wrap(err)
	}
	return ferr
}

// Close waits for running calls and closes the file. Later calls fail
// with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	if s.w != nil && s.shmGone == nil && !s.wlost {
		// The writer's connection, in use since its last transaction, maps the index: this
		// process's connections cannot have removed it (checkIndex).
		if _, _, same := s.fileAt(); same {
			_ = s.checkIndex()
		}
	}
	if s.w != nil && s.shmGone != nil {
		// The last connection to close checkpoints the log through this process's index,
		// which lacks the frames other processes wrote since through the new one, and then
		// deletes the log with them. The connections are left open: their descriptors end
		// with the process, as a kill's do, and the log stays whole.
		return s.shmGone
	}
	s.settleMoved()
	err := errors.Join(s.closeWriter(), s.closeReaders(), s.closeFrozen())
	s.release()
	return err
}

// closeFrozen closes what an AtRest store reads through, once its readers are closed.
func (s *Store) closeFrozen() error {
	var err error
	if s.vfs != nil {
		err = s.vfs.Close()
	}
	if s.frozen != nil {
		s.frozen.close()
	}
	return err
}

// StillAtRest says, of a store opened AtRest, what changed since it was opened that may have
// changed what it read ("" when nothing did): a process opened the ledger, or its file or
// log is not what was read. Always "" for a store not opened AtRest.
func (s *Store) StillAtRest() string {
	if s.frozen == nil {
		return ""
	}
	return s.frozen.stillFrozen()
}

// ReadAtRest reports whether the store was opened AtRest: nothing was recovered or swept at
// its open, so a claim whose holder is gone shows as that holder filed it.
func (s *Store) ReadAtRest() bool { return s.frozen != nil }

// AtRestFrames is how many committed frames of its log a store opened AtRest read with the
// file (0 for one without a log, or not opened AtRest).
func (s *Store) AtRestFrames() int {
	if s.frozen == nil {
		return 0
	}
	return int(s.frozen.nFrames)
}
