package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/effectfence/effectfence/pkg/fence"
)

// CheckReport is what Check found out about a ledger file, and what to do about it.
type CheckReport struct {
	Path string `json:"path"`
	// OK is true when the file is a healthy effectfence ledger this build can use.
	OK bool `json:"ok"`
	// Kind is "effectfence ledger", "empty file", "foreign SQLite database", "not SQLite",
	// "torn SQLite file" (shorter than the SQLite header: what it was cannot be told), "missing", "file mounted alone", "special file beside it" (a named pipe, a device or a directory where its log or index belongs), "file with several names" (hard links), "file open
	// under another name" (moved or linked while a process had it open), or "SQLite database"
	// for one that could not be read and whose header does not name it a ledger (its first
	// pages may still be only in its write-ahead log).
	Kind          string `json:"kind"`
	Bytes         int64  `json:"bytes"`
	WALBytes      int64  `json:"wal_bytes"`
	SchemaVersion int    `json:"schema_version,omitempty"`
	BuildSchema   int    `json:"build_schema_version"`
	// RecordsLayout is how the records table is stored: "without rowid" (schema 1) or "rowid"
	// (schema 2 on).
	RecordsLayout string         `json:"records_layout,omitempty"`
	Integrity     []string       `json:"integrity,omitempty"`
	States        map[string]int `json:"states,omitempty"`
	Events        int            `json:"events"`
	// Outlived names each claim filed in flight that the next open of the ledger takes from
	// its holder (fence.Outlived: its holder gone, or its lease lapsed): States counts it as
	// ls and show show it, unknown (or not at all when that open frees it), as every open
	// but check's marks it.
	Outlived []string `json:"outlived,omitempty"`
	Problems []string `json:"problems,omitempty"`
	Advice   []string `json:"advice,omitempty"`

	// unreadable is the first record found that does not decode or names another intent, and
	// unreadableEvent the row id of the first audit event that does not decode (checkEvents).
	// unreadableLines counts the problems that name such a record or event: when it counts
	// every problem, the file itself is sound.
	unreadable      string
	unreadableEvent int64
	unreadableLines int
	// diskFault is set when SQLite could not read the file because of its file system (no
	// room left, read-only, a quota), not because of the file: no damage, nothing to move aside.
	diskFault bool
}

const (
	adviceAside = "to start over, stop every effectfence process that uses it and move it aside with its write-ahead log and index if they are there (mv %[1]s %[1]s.bad; mv %[1]s-wal %[1]s.bad-wal; mv %[1]s-shm %[1]s.bad-shm); a new ledger is created on the next start, but it will not replay effects recorded only in the old one"
	adviceNewer = "use %[1]s with the effectfence that wrote it or a later one (one that reads schema version %[2]d); do not move it aside or start a new ledger in its place: a new ledger would not replay the effects recorded in this one, and they could run again"
	adviceCopy  = "keep a copy before anything else (cp %[1]s %[1]s.copy); the sqlite3 shell can often salvage rows: sqlite3 %[1]s .recover | sqlite3 %[1]s.recovered, then run `effectfence ledger check --ledger %[1]s.recovered`"
)

// orphanLog reports in r a non-empty write-ahead log beside a ledger that is missing or empty
// (see OrphanLog), and whether there was one.
func (r *CheckReport) orphanLog() bool {
	problem, advice := OrphanLog(r.Path)
	if problem == "" {
		return false
	}
	r.Problems = append(r.Problems, "the file "+problem)
	r.Advice = append(r.Advice, advice)
	return true
}

// refused reports whether err is a FileError of a check that opening the file would fail,
// and if so puts it in the report as a problem of the kind given, with its way out.
func (r *CheckReport) refused(kind string, err error) bool {
	var fe *FileError
	if !errors.As(err, &fe) {
		return false
	}
	r.Kind = kind
	r.Problems = append(r.Problems, "it "+fe.Problem)
	r.Advice = append(r.Advice, fe.Advice)
	return true
}

// Check inspects the file at path without changing it: whether it is SQLite at all, whether it
// is an effectfence ledger and of which schema, whether it is truncated, and SQLite's own
// integrity_check. It fails only when it cannot look at all; everything it finds is in the
// report.
func Check(ctx context.Context, path string) (*CheckReport, error) {
	r := &CheckReport{Path: path, BuildSchema: SchemaVersion}
	fi, err := os.Stat(path)
	if wi, err := os.Stat(path + "-wal"); err == nil {
		r.WALBytes = wi.Size()
	}
	if errors.Is(err, os.ErrNotExist) {
		r.Kind = "missing"
		if r.orphanLog() {
			return r, nil
		}
		r.Problems = append(r.Problems, "the file does not exist")
		r.Advice = append(r.Advice, "nothing to check: a ledger is created on first use; check --ledger, EFFECTFENCE_LEDGER or --for if you expected one here")
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a ledger file", path)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a ledger file", path, irregular(fi.Mode()))
	}
	r.Bytes = fi.Size()
	// Opening it would put a log and an index beside the mount point.
	if r.refused("file mounted alone", checkMountedAlone(path)) {
		return r, nil
	}
	// Opening it under this name would read a log other than the one its decisions are in.
	for _, c := range []struct {
		kind  string
		check func() error
	}{{"special file beside it", func() error { return checkBeside(path) }}, {"file with several names", func() error { return checkOneName(path, fi) }}, {"file open under another name", func() error { return checkOtherName(path) }}, {"log of another file", func() error { return checkOwnLog(path) }}} {
		if r.refused(c.kind, c.check()) {
			return r, nil
		}
	}
	if r.Bytes == 0 {
		r.Kind = "empty file"
		if r.orphanLog() {
			return r, nil
		}
		if r.refused("emptied ledger", checkEmptied(path)) {
			return r, nil
		}
		r.OK = true
		r.Advice = append(r.Advice, "an empty file becomes a ledger on first use")
		return r, nil
	}
	head := make([]byte, 100)
	n := 0
	// A Store of this process has the file open: it checked the header, and a descriptor of
	// ours, closed, would drop its locks (here.go).
	mine, err := aside(fi, func() error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		n, _ = f.Read(head)
		return f.Close()
	})
	if err != nil {
		return nil, err
	}
	if !mine {
		if n < len(sqliteMagic) || string(head[:len(sqliteMagic)]) != sqliteMagic {
			r.Kind = "not SQLite"
			r.Problems = append(r.Problems, "the file is not a SQLite database: it is not an effectfence ledger (or its first bytes were overwritten)")
			r.Advice = append(r.Advice, "point --ledger or EFFECTFENCE_LEDGER at the right file", fmt.Sprintf(adviceAside, path))
			return r, nil
		}
		if n < 100 {
			// What the file was is in the header's bytes it no longer has (application_id is
			// at 68): it begins as SQLite, and nothing more can be told.
			r.Kind = "torn SQLite file"
			r.Problems = append(r.Problems, fmt.Sprintf("the file is truncated (torn): %d bytes, shorter than the 100-byte SQLite header; it begins as a SQLite database, but whether it was an effectfence ledger or another program's database cannot be read from what is left", r.Bytes))
			r.Advice = append(r.Advice, fmt.Sprintf(adviceAside, path))
			return r, nil
		}
		// The file must hold every page its header counts that its write-ahead log does not:
		// judged as an open judges it (checkLength), the header, the size and the log read
		// again for a while, since a checkpoint of a process writing the ledger writes page 1
		// first and may then restart the log (judged once, from a size read before the log, a
		// live ledger was reported truncated: TestLedgerViewsWhileWrapsWrite, 2026-12-07).
		f, err := os.Open(path)
		if err == nil {
			err = checkLength(f, path, head)
			f.Close()
		}
		var fe *FileError
		switch {
		case errors.As(err, &fe):
			r.Problems = append(r.Problems, "the file "+fe.Problem)
		case err != nil:
			r.Problems = append(r.Problems, "cannot read the file: "+err.Error())
		}
	}

	if what, err := walDamage(path); err != nil {
		r.Problems = append(r.Problems, "cannot read the write-ahead log: "+err.Error())
	} else if what != "" {
		r.Problems = append(r.Problems, "the file "+what)
	}
	if !mine {
		// Before anything opens the ledger: the first connection rebuilds the index.
		if problem, advice, err := walLost(path); err != nil {
			r.Problems = append(r.Problems, "cannot read the write-ahead log or its index: "+err.Error())
		} else if problem != "" {
			// Not read: opened, it would be read without the lost frames. The kind is what
			// the file's header says (its application_id).
			r.Kind = "SQLite database"
			if binary.BigEndian.Uint32(head[68:72]) == applicationID {
				r.Kind = "effectfence ledger"
			}
			r.Problems = append(r.Problems, "the file "+problem)
			r.Advice = append(r.Advice, advice)
			return r, nil
		}
	}

	readOnly := Options{ReadOnly: true, BusyTimeout: 5 * time.Second}
	if !mine {
		read, err := r.readAtRest(ctx, fi, path, readOnly)
		if err != nil {
			return nil, err
		}
		if read {
			return r, nil
		}
	}
	db, err := sql.Open("sqlite", dsn(path, readOnly, false))
	if err != nil {
		return nil, err
	}
	defer func() { db.Close() }()
	// A reader of a WAL ledger needs its shared-memory file (-shm) beside it, which SQLite
	// creates on first use; a ledger at rest has none, so in a directory this user cannot
	// write SQLite refuses to read it. With no write-ahead log to apply either, the file alone
	// is the whole ledger and no process has it open: it is read as an immutable file. With a
	// log, it cannot be read correctly here, which says nothing against the ledger.
	var probe int64
	if err := db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&probe); noSharedMemory(err, path) {
		if r.WALBytes > 0 {
			// Not read: the kind is what the file's header says (its application_id).
			r.Kind = "SQLite database"
			if binary.BigEndian.Uint32(head[68:72]) == applicationID {
				r.Kind = "effectfence ledger"
			}
			r.Problems = append(r.Problems, fmt.Sprintf("cannot be read in this directory: it is not writable by this user, and the ledger has a write-ahead log (%s-wal, %d bytes) that SQLite applies only beside a shared-memory file it must create there; this is no damage to the ledger", path, r.WALBytes))
			r.Advice = append(r.Advice, fmt.Sprintf("check a copy: copy %[1]s and %[1]s-wal together into a directory you can write, then run `effectfence ledger check --ledger` on the copy; or run the check as a user who can write %[2]s", path, filepath.Dir(path)))
			return r, nil
		}
		db.Close()
		if db, err = sql.Open("sqlite", dsn(path, readOnly, false)+"&immutable=1"); err != nil {
			return nil, err
		}
	}
	r.read(ctx, db, path)
	if pid := replacedIndexUser(path); pid != 0 {
		// The file is sound; the process is not, and a read of the ledger cannot show it.
		r.Problems = append(r.Problems, fmt.Sprintf("process %d has the ledger open with an index (%s-shm) that was removed or replaced while it used it: it records nothing more (its calls fail), and what it would write no process opening the ledger now would see", pid, path))
		r.Advice = append(r.Advice, fmt.Sprintf("restart process %d and every other effectfence process that had the ledger open before its index was removed (closing, each leaves its log whole); never remove a ledger's -shm or -wal file while a process uses it; the ledger file is not damaged: do not move it aside", pid))
	}
	r.OK = len(r.Problems) == 0
	return r, nil
}

// readAtRest reads a ledger at rest (restingReader: no process has it open) as an immutable
// file, which leaves nothing beside it. SQLite's read-only open of a ledger in WAL mode
// creates an empty log and an index beside it, which it leaves when it closes and which the
// next process to open the ledger takes as its own: made from a read-only file, the index is
// read-only, and a process that could write the file then could not use it. It reports false,
// r left as it was, when the ledger is not at rest, or when a process opened it during the
// read, which may have changed the pages read. A ledger with a log or an index beside it
// that no process has open (a holder killed) is read through readFrozen. No Store of this
// process opens the file meanwhile (aside): closing a descriptor of it would drop that
// Store's locks.
func (r *CheckReport) readAtRest(ctx context.Context, fi os.FileInfo, path string, o Options) (bool, error) {
	before := *r
	read := false
	_, err := aside(fi, func() error {
		f := restingReader(path)
		if f == nil {
			// A log or an index beside it, or a process has it open (then openFrozen
			// refuses, and SQLite's own read follows).
			if read = r.readFrozen(ctx, path, o); !read {
				*r = before
			}
			return nil
		}
		defer f.Close()
		db, err := sql.Open("sqlite", dsn(path, o, false)+"&immutable=1")
		if err != nil {
			return err
		}
		r.read(ctx, db, path)
		db.Close()
		if read = stillAtRest(f, path); read {
			r.OK = len(r.Problems) == 0
		} else {
			*r = before
		}
		return nil
	})
	return read, err
}

// readFrozen reads a ledger that no process has open, with a log (or an index) beside it, as
// a view reads it at rest (frozen.go): the file and the committed frames of its log, through
// a read-only VFS. SQLite's own read of a log that no process has open is its recovery, which
// cuts the index to 3 bytes and rebuilds it beside the ledger: a write that check promises
// not to make, which on a full disk fails and leaves the index cut (and check could not read
// the ledger). It reports false, r to be reset, when the ledger is not at rest, when the image
// cannot be read (SQLite's own read then judges it), or when a process opened or changed the
// ledger during the read.
func (r *CheckReport) readFrozen(ctx context.Context, path string, o Options) bool {
	img, name, fsys, err := serveFrozen(path)
	if err != nil {
		return false
	}
	defer img.close()
	defer fsys.Close()
	o.vfs = name
	db, err := sql.Open("sqlite", dsn(path, o, false))
	if err != nil {
		return false
	}
	r.read(ctx, db, path)
	db.Close()
	if img.stillFrozen() != "" {
		return false
	}
	r.OK = len(r.Problems) == 0
	return true
}

// read fills the report from the ledger open in db, with the advice its problems call for.
func (r *CheckReport) read(ctx context.Context, db *sql.DB, path string) {
	r.inspect(ctx, db)
	switch {
	case r.SchemaVersion > SchemaVersion:
		// A newer build's ledger is not damaged: moving it aside would lose every receipt it
		// holds, and the effects they record could run again.
		if len(r.Problems) > 1 {
			r.Advice = append(r.Advice, fmt.Sprintf(adviceCopy, path))
		}
		r.Advice = append(r.Advice, fmt.Sprintf(adviceNewer, path, r.SchemaVersion))
	case r.unreadableLines > 0 && r.unreadableLines == len(r.Problems):
		// Each such record fences its own intent and hides nothing else; moving the ledger
		// aside would drop every other receipt, and their duplicates would run again.
		r.Advice = append(r.Advice, fmt.Sprintf("keep a copy before anything else (cp %[1]s %[1]s.copy)", path))
		if r.unreadable != "" {
			r.Advice = append(r.Advice, fmt.Sprintf("each unreadable record fences its intent (no call of it runs) and hides nothing else: check in the real system whether its effect happened, then remove the record, e.g. %s; the next attempt of that intent runs", removeCommand(path, r.unreadable)))
		}
		if r.unreadableEvent != 0 {
			r.Advice = append(r.Advice, fmt.Sprintf("each unreadable audit event hides nothing else (ledger show and export leave it out and name it), but the engine's own reads of its intent's audit trail fail on it until it is removed, e.g. %s", removeEventCommand(path, r.unreadableEvent)))
		}
	case r.diskFault:
		// The file was not read, so nothing is known against it: moving it aside for a new
		// ledger would lose every receipt it holds, and their calls could run again.
		r.Advice = append(r.Advice, fmt.Sprintf("make the file system under %[1]s writable again or make room on it (df -h %[2]s), then run `effectfence ledger check` again; do not move the ledger aside or start a new one: nothing is known to be wrong with the file, and a new ledger would not replay the effects recorded in this one", path, filepath.Dir(path)))
	case len(r.Problems) > 0:
		if r.Kind == "effectfence ledger" {
			r.Advice = append(r.Advice, fmt.Sprintf(adviceCopy, path))
		}
		r.Advice = append(r.Advice, fmt.Sprintf(adviceAside, path))
	}
	var fe *FileError
	if r.Kind == "effectfence ledger" && r.SchemaVersion >= oldestReadable && r.SchemaVersion <= SchemaVersion && errors.As(checkOldNames(ctx, db, path, realPath(path)), &fe) {
		// Not damage, and moving the file aside would not help: its log is elsewhere.
		r.Problems = append(r.Problems, "the file "+fe.Problem)
		r.Advice = append(r.Advice, fe.Advice)
	}
}

// inspect fills the report from an open read-only database, recording failures as problems.
func (r *CheckReport) inspect(ctx context.Context, db *sql.DB) {
	var appID int64
	if err := db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		r.Kind = "effectfence ledger"
		if cause := fileSystemFault(r.Path, err); cause != "" {
			// SQLite reads a ledger in WAL mode beside its index (-shm), which it makes, and
			// grows, on first use: on a full disk that fails with "disk I/O error", which was
			// reported as damage to the file, with the advice to move it aside.
			r.Problems = append(r.Problems, fmt.Sprintf("cannot be read here now: %s, and SQLite must write its index beside the ledger (%s-shm) to read it (%v); this is no damage to the ledger", cause, r.Path, err))
			r.diskFault = true
			return
		}
		r.Problems = append(r.Problems, "SQLite cannot read the file: "+err.Error())
		return
	}
	if appID != applicationID {
		var tables int
		_ = db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&tables)
		if appID != 0 || tables > 0 {
			r.Kind = "foreign SQLite database"
			r.Problems = append(r.Problems, fmt.Sprintf("the file is a SQLite database of another application (application_id %#x, %d schema objects), not an effectfence ledger", appID, tables))
			return
		}
		r.Kind = "empty file"
		r.OK = true
		return
	}
	r.Kind = "effectfence ledger"
	v, err := schemaVersion(ctx, db)
	if err != nil {
		r.Problems = append(r.Problems, "cannot read the schema version: "+err.Error())
	}
	r.SchemaVersion = v
	switch {
	case v > SchemaVersion:
		r.Problems = append(r.Problems, fmt.Sprintf("schema version %d is newer than this build's %d: a newer effectfence wrote it; upgrade effectfence", v, SchemaVersion))
	case v < SchemaVersion && err == nil:
		r.Advice = append(r.Advice, fmt.Sprintf("schema version %d is older than this build's %d; it is migrated in place the next time a process opens it for writing (any command but `ledger check`)", v, SchemaVersion))
	}
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		r.Problems = append(r.Problems, "integrity_check could not run: "+err.Error())
		return
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			break
		}
		r.Integrity = append(r.Integrity, line)
	}
	if err := rows.Err(); err != nil {
		r.Problems = append(r.Problems, "integrity_check failed: "+err.Error())
	}
	rows.Close()
	if len(r.Integrity) != 1 || r.Integrity[0] != "ok" {
		r.Problems = append(r.Problems, fmt.Sprintf("SQLite's integrity_check found %d problem(s)", len(r.Integrity)))
	}
	if v < oldestReadable || v > SchemaVersion {
		return
	}
	r.checkLayout(ctx, db, v)
	rows, err = db.QueryContext(ctx, "SELECT state, count(*) FROM records GROUP BY state")
	if err != nil {
		r.Problems = append(r.Problems, "cannot count records: "+err.Error())
		return
	}
	defer rows.Close()
	r.States = map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			r.Problems = append(r.Problems, "cannot count records: "+err.Error())
			return
		}
		r.States[st] = n
	}
	if err := rows.Err(); err != nil {
		r.Problems = append(r.Problems, "cannot count records: "+err.Error())
	}
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM events").Scan(&r.Events); err != nil {
		r.Problems = append(r.Problems, "cannot count events: "+err.Error())
	}
	r.checkRecords(ctx, db, v)
	r.checkEvents(ctx, db)
}

// checkEvents names each audit event the store cannot decode (a token below zero: the file
// edited by hand). Such an event hides nothing else, as an unreadable record does not: `show`
// and `export` leave it out and name it; but the engine's own reads of its intent's audit
// trail fail on it until it is removed. Before, check counted events and named none of these
// (TestCheckNamesUnreadableEvents).
func (r *CheckReport) checkEvents(ctx context.Context, db *sql.DB) {
	has, err := hasEventTokens(ctx, db)
	if err != nil {
		r.Problems = append(r.Problems, "cannot read events: "+err.Error())
		return
	}
	if !has {
		return
	}
	rows, err := db.QueryContext(ctx, "SELECT id, intent, token FROM events WHERE token < 0 ORDER BY id")
	if err != nil {
		r.Problems = append(r.Problems, "cannot read events: "+err.Error())
		return
	}
	defer rows.Close()
	const shown = 20
	n := 0
	for rows.Next() {
		var id, token int64
		var intent string
		if err := rows.Scan(&id, &intent, &token); err != nil {
			r.Problems = append(r.Problems, "cannot read events: "+err.Error())
			return
		}
		if n == 0 {
			r.unreadableEvent = id
		}
		if n++; n <= shown {
			r.Problems = append(r.Problems, fmt.Sprintf("audit event %d of intent %q is unreadable (token %d, below zero)", id, intent, token))
			r.unreadableLines++
		}
	}
	if err := rows.Err(); err != nil {
		r.Problems = append(r.Problems, "cannot read events: "+err.Error())
		return
	}
	if n > shown {
		r.Problems = append(r.Problems, fmt.Sprintf("… %d more unreadable audit event(s)", n-shown))
		r.unreadableLines++
	}
}

// checkRecords decodes every record body as the store does when it reads one: a body that
// does not decode, or that names another intent than the row it is in, fences its intent (a
// duplicate's prepare, show, clear fail on it; ls, export and stats leave it out and name it;
// verify reports it), and one filed under another state, expiry or cert hash is read by the
// wrong queries, so each must be found here too, by intent. SQLite's integrity checks cannot see it: the
// pages are sound, a record's bytes are not (edited by hand, or zeros where a torn file was
// extended).
//
// A split body (split.go, schema 3) is read joined with its pieces, as the store reads it.
func (r *CheckReport) checkRecords(ctx context.Context, db *sql.DB, v int) {
	q := "SELECT intent, state, expires_at, cert_hash, body, NULL FROM records"
	if v >= 3 {
		q = "SELECT r.intent, r.state, r.expires_at, r.cert_hash, r.body, a.bytes FROM records r LEFT JOIN record_args a ON a.id = r.id"
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		r.Problems = append(r.Problems, "cannot read records: "+err.Error())
		return
	}
	defer rows.Close()
	const shown = 20
	bad, other := 0, 0
	for rows.Next() {
		var intent, state string
		var expires sql.NullInt64
		var hash sql.NullString
		var body, pieces []byte
		if err := rows.Scan(&intent, &state, &expires, &hash, &body, &pieces); err != nil {
			r.Problems = append(r.Problems, "cannot read records: "+err.Error())
			return
		}
		var rec fence.Record
		what := ""
		if isSplit(body) {
			switch {
			case pieces == nil:
				what = "is unreadable (its arguments, in table record_args, are missing)"
			case !checkPieces(body, pieces):
				what = "is unreadable (its arguments, in table record_args, are not the ones it was stored with)"
			default:
				whole, err := joinBody(body, pieces)
				if err != nil {
					what = fmt.Sprintf("is unreadable (%v)", err)
				}
				body = whole
			}
		}
		switch err := fence.DecodeRecord(body, &rec); {
		case what != "":
		case err != nil:
			what = fmt.Sprintf("is unreadable (%v)", err)
		case rec.Intent != intent:
			what = fmt.Sprintf("names intent %q", rec.Intent)
		}
		unreadable := what != ""
		if unreadable && r.unreadable == "" {
			r.unreadable = intent
		}
		if !unreadable && rec.State == fence.StateInFlight && state == string(fence.StateInFlight) {
			// Judged as every other open judges it, by the ledger's clock (this host's, for a
			// SQLite ledger): a claim of a holder killed with SIGKILL was counted in flight
			// here, and unknown by ls and show, whose open had marked it so.
			if why, freed := fence.Outlived(time.Now(), rec); why != "" {
				r.States[state]--
				if r.States[state] == 0 {
					delete(r.States, state)
				}
				to := "marks it unknown (fenced)"
				if freed {
					to = "frees it for the next attempt"
				} else {
					r.States[string(fence.StateUnknown)]++
				}
				r.Outlived = append(r.Outlived, fmt.Sprintf("the claim of intent %q is filed in_flight, but its %s: the next open of the ledger (ls, show, wrap, serve) %s; check counts it so and writes nothing", intent, why, to))
			}
		}
		switch {
		case unreadable:
		case string(rec.State) != state:
			what = fmt.Sprintf("says state %q but is filed as %q", rec.State, state)
		case expires.Valid != !rec.ExpiresAt.IsZero() || expires.Valid && expires.Int64 != unixNano(rec.ExpiresAt):
			// The sweep drops records by this column: an earlier one drops a done outcome
			// before its time, and its duplicate runs again.
			what = "is filed with another expiry than it records"
		case hash.Valid != (rec.Cert != nil) || rec.Cert != nil && hash.String != rec.Cert.Hash:
			what = "is filed with another cert hash than its cert's"
		default:
			continue
		}
		if !unreadable {
			other++
		}
		if bad++; bad <= shown {
			r.Problems = append(r.Problems, fmt.Sprintf("the record of intent %q %s", intent, what))
			if unreadable {
				r.unreadableLines++
			}
		}
	}
	if err := rows.Err(); err != nil {
		r.Problems = append(r.Problems, "cannot read records: "+err.Error())
	}
	if bad > shown {
		r.Problems = append(r.Problems, fmt.Sprintf("… %d more damaged record(s)", bad-shown))
		if other == 0 {
			r.unreadableLines++
		}
	}
}

// checkLayout records how the records table is stored and reports a layout that its schema
// version does not describe (a migration is one transaction, so only a file edited by hand
// or damaged shows one).
func (r *CheckReport) checkLayout(ctx context.Context, db *sql.DB, v int) {
	var withoutRowid bool
	if err := db.QueryRowContext(ctx, "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = 'records'").Scan(&withoutRowid); err != nil {
		r.Problems = append(r.Problems, "cannot read the records table's layout: "+err.Error())
		return
	}
	r.RecordsLayout = "rowid"
	if withoutRowid {
		r.RecordsLayout = "without rowid"
	}
	if want := v < 2; withoutRowid != want {
		r.Problems = append(r.Problems, fmt.Sprintf("the records table is stored %s, which schema version %d does not use", r.RecordsLayout, v))
		return
	}
	if v >= 2 {
		var unique int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_index_list('records') AS l, pragma_index_info(l.name) AS i
			WHERE l."unique" AND i.name = 'intent' AND (SELECT count(*) FROM pragma_index_info(l.name)) = 1`).Scan(&unique)
		if err != nil {
			r.Problems = append(r.Problems, "cannot read the records table's indexes: "+err.Error())
		} else if unique == 0 {
			r.Problems = append(r.Problems, "the records table lacks its unique index on intent: two records could claim one intent")
		}
	}
	if v >= 3 {
		// record_args holds the arguments of split records (split.go); its triggers drop a
		// record's pieces with the record.
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE (type = 'table' AND name = 'record_args')
			OR (type = 'trigger' AND name IN ('records_args_whole', 'records_args_deleted'))`).Scan(&n)
		if err != nil {
			r.Problems = append(r.Problems, "cannot read the record_args table's layout: "+err.Error())
		} else if n != 3 {
			r.Problems = append(r.Problems, fmt.Sprintf("schema version %d keeps large arguments in table record_args, with triggers records_args_whole and records_args_deleted, and some of the three are missing", v))
		}
	}
}

// fileSystemFault names what the file system under the ledger at path shows that failed err,
// a read of the ledger, when err is SQLite's I/O error or full disk (diskTrouble); "" for
// any other error, or when the file system shows nothing.
func fileSystemFault(path string, err error) string {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return ""
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
		if se.Code() == sqlite3.SQLITE_IOERR_SHORT_READ {
			return "" // the file is shorter than its pages: damage, not the disk
		}
		return diskTrouble(path, se.Code()&0xff == sqlite3.SQLITE_FULL)
	}
	return ""
}

// noSharedMemory reports whether err is SQLite refusing to read the WAL database at path
// because it cannot create the shared-memory file in its directory: SQLITE_READONLY_DIRECTORY
// when there is no log, SQLITE_CANTOPEN when there is one, with no -shm beside it either way.
func noSharedMemory(err error, path string) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) || (se.Code() != sqlite3.SQLITE_READONLY_DIRECTORY && se.Code()&0xff != sqlite3.SQLITE_CANTOPEN) {
		return false
	}
	_, serr := os.Lstat(path + "-shm")
	return errors.Is(serr, os.ErrNotExist)
}
