package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// A ledger file remembers the names it was opened under for writing (meta rows "name:PATH",
// the resolved path, valued with the time it was first used; see noteName), so that a process opening it
// under another name can look for a write-ahead log of it beside an old one. SQLite keeps
// the log beside the name it opened, and does not copy it into a file that moved when it
// closes it: a file moved after the process using it was killed (or after its machine went
// down) lacks every decision committed since the last checkpoint, which are in the log beside
// the old name. A process opening the moved file would answer their duplicates as new calls.
// checkOldNames refuses that, unless the log was settled: copied into the file completely by
// a process that found the file moved (settledMark).

// FormerNames returns the names the ledger file was opened under for writing, other than
// the one it is open under, at which no file is now: names it was moved away from. What was
// kept beside such a name for it (an outcome spool) is the file's, unless another ledger was
// kept there since.
func (s *Store) FormerNames(ctx context.Context) ([]string, error) {
	names, err := oldNames(ctx, s.r, s.real)
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, n := range names {
		if _, err := os.Lstat(n); errors.Is(err, os.ErrNotExist) {
			gone = append(gone, n)
		}
	}
	return gone, nil
}

// OtherNames returns every name the ledger file was opened under for writing other than the
// one it is open under, whatever is at it now (FormerNames keeps those with nothing there):
// another ledger made at such a name since does not take what waits beside it for this one
// (fence.SpoolHolds tells).
func (s *Store) OtherNames(ctx context.Context) ([]string, error) {
	return oldNames(ctx, s.r, s.real)
}

// nameKey is the prefix of the meta rows that record the names a ledger file was opened under.
const nameKey = "name:"

// maxNames is how many names a ledger remembers; the oldest are forgotten.
const maxNames = 4

// noteName records the name the ledger is opened under (s.real), once the file has passed
// its checks, if the ledger does not know it yet; the write takes its turn like the
// migration's. The record reaches the file itself at the next checkpoint (SQLite's automatic
// one, every 1000 pages, or any process's clean close). Not at once: a checkpoint here lets
// the log be reused from its start, so a disk that filled after the open no longer refuses the
// first decisions (the disk-full tests rely on it). A process killed before that checkpoint
// leaves a new name only in its log: the file remembers the names it had before (and a new
// ledger's file holds nothing yet, its very tables being in the log).
func (s *Store) noteName(ctx context.Context) error {
	key := nameKey + s.real
	var n int
	if err := s.w.QueryRowContext(ctx, "SELECT count(*) FROM meta WHERE key = ?", key).Scan(&n); err != nil || n > 0 {
		return err
	}
	t := s.turns.enter(s.opt.BusyTimeout, ctx.Done())
	defer s.turns.leave(t)
	return retryBusy(ctx, s.opt.BusyTimeout, func() error {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING", key, time.Now().Unix()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM meta WHERE key IN (SELECT key FROM meta WHERE key LIKE 'name:%' ORDER BY value DESC, key LIMIT -1 OFFSET ?)", maxNames); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// oldNames reads the names the ledger remembers other than name.
func oldNames(ctx context.Context, db *sql.DB, name string) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT substr(key, ?) FROM meta WHERE key LIKE 'name:%' ORDER BY key", len(nameKey)+1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		if n != name {
			names = append(names, n)
		}
	}
	return names, rows.Err()
}

// checkOldNames refuses a ledger file (at name, resolved) that was used under another name
// beside which a write-ahead log is left that may hold decisions the file lacks: the log is
// not empty, it is not the log beside this name (the file's directory reached by another
// path, a bind mount: mount --bind, docker -v), nothing else is at that name now (or this
// very file is: a second name), and no process marked the log settled into the file as it is
// now. It runs before anything is
// written under this name.
//
// Its advice (put the file back, or bring the log beside this name) applies the log to this
// file, which is right only if the log is this file's: if another ledger file was kept at the
// old name after this one left (moved there, its holder killed, then removed), the log may be
// that ledger's. Nothing cheap tells (see checkOwnLog), so the advice says to make sure first.
// A log beside an old name where another file is now is taken for that file's and skipped.
func checkOldNames(ctx context.Context, db *sql.DB, path, name string) error {
	if v, err := schemaVersion(ctx, db); err != nil || v == 0 {
		return err // a new ledger: no names yet
	}
	names, err := oldNames(ctx, db, name)
	if err != nil {
		return err
	}
	ours, err := os.Stat(name)
	if err != nil {
		return nil // checkFile's business
	}
	ourLog, _ := os.Stat(name + "-wal")
	for _, old := range names {
		log, err := os.Stat(old + "-wal")
		if err != nil || log.Size() == 0 {
			continue
		}
		if ourLog != nil && os.SameFile(log, ourLog) {
			continue // the very log SQLite uses under this name: its directory reached another way (a bind mount)
		}
		if fi, err := os.Stat(old); err == nil && !os.SameFile(fi, ours) || err != nil && !errors.Is(err, os.ErrNotExist) {
			continue // another ledger is at that name now, and the log is its own
		}
		if ok, _ := settled(old+"-wal", log); ok {
			continue
		}
		return &FileError{Path: path,
			Problem: fmt.Sprintf("was used under the name %s, and the write-ahead log left beside that name (%s-wal, %d bytes) may hold decisions this file lacks: the file was moved (or given this name) after a process using the old name stopped without copying its log in (killed, or its machine went down)", old, old, log.Size()),
			Advice:  fmt.Sprintf("stop every effectfence process that uses either name; if this file was the last ledger kept at %s (no other ledger file was put there or started there after it left), put the file back at %s (its log applies on the next open), or move the log and its index beside this name (mv %s-wal %s-wal; mv %s-shm %s-shm), which keeps every decision; if another ledger was kept there since, the log may be that ledger's, and either way would apply it to this file: put that ledger back at %s instead, and open this one only once %s-wal is gone; nothing was changed", old, old, old, name, old, name, old, old)}
	}
	return nil
}

// settledMark names the file that says a write-ahead log was copied into its ledger file
// completely after the file moved away from the log's name. Its content is the log's size and
// modification time then, and, where this process can see it (Linux), the moved file's device,
// inode, size and modification time right after the copy ("LOGSIZE LOGMTIME DEV INO SIZE
// MTIME"). A log that changed since is not settled.
//
// A settled log stays beside the old name: a process opening that name while no file is there
// is refused (checkOrphanLog), instead of starting a new ledger beside the moved one. But its
// records are all in the moved file, and that file may have changed since (it was used under
// its new name): SQLite opening a file under the old name applies the log beside it, whatever
// file it is, over that file's pages, undoing what was written since. Before 2026-12-03 the
// file moved back (mv NEW OLD, as the refusal of the old name advises) answered every call
// recorded under the new name as new (TestLedgerMovedBackBesideItsSettledLogIsRefused), and
// quick_check saw nothing. checkOwnLog refuses that.
func settledMark(log string) string { return log + ".settled" }

// settled says whether the log at path, as fi describes it, is the one a process marked
// settled, and the state of the file it was copied into, as the mark has it ("" when the mark
// does not say).
func settled(path string, fi os.FileInfo) (ok bool, file string) {
	b, err := os.ReadFile(settledMark(path))
	if err != nil {
		return false, ""
	}
	f := strings.Fields(string(b))
	if len(f) < 2 || f[0]+" "+f[1] != logStamp(fi) {
		return false, ""
	}
	return true, strings.Join(f[2:], " ")
}

func logStamp(fi os.FileInfo) string {
	return fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
}

// fileStamp is the state of a ledger file that a settled log's mark records: its device and
// inode, size and modification time; "" when the system does not say.
func fileStamp(fi os.FileInfo) string {
	dev, ino, ok := fileID(fi)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d %d %d %d", dev, ino, fi.Size(), fi.ModTime().UnixNano())
}

// markSettled records that the log beside name was copied completely into the ledger file
// file (as stat described it when the store opened it), which has moved from name (see
// settledMark). Best effort: without the mark, a process opening the moved file refuses until
// the log is moved beside it, and one opening a file at name refuses too.
func markSettled(name string, file os.FileInfo) {
	log := name + "-wal"
	fi, err := os.Stat(log)
	if err != nil {
		return
	}
	mark := logStamp(fi)
	if now := fileStamp(fileNow(file)); now != "" {
		mark += " " + now
	}
	_ = os.WriteFile(settledMark(log), []byte(mark+"\n"), 0o600)
}

// checkOwnLog refuses the ledger file at path when the write-ahead log beside it (beside the
// resolved name, where SQLite looks) is not known to be this file's as it is now, before any
// connection opens it: SQLite applies the log beside the name it opens, whatever file is
// there, and nothing in either file ties them (in WAL mode the file's header holds nothing
// of its log: the change counter is not kept, and the log's salts are in the log only), so
// SQLite cannot see a log of another file, or an old one of this file, and quick_check sees
// nothing after it was applied. Refused:
//   - a log that a process uses for another file (Linux, foreignLogUser): the file at path was
//     moved here, or put here in place of that process's, while it kept its own open;
//   - a settled log (settledMark), unless its mark records this very file unchanged since the
//     log was copied into it (then applying the log writes the pages the file already has).
//     Whether a process uses it does not matter: SQLite reads a page from the log when the log
//     has it, so a process joining a live holder's log (its file put back here) would read
//     the old pages too, if the file was written under another name meanwhile (by a process
//     that could not see the holder's descriptors). Its records are all in the file they were
//     copied into: once no process uses it, removing it loses nothing, which the advice
//     says. It is not removed here: another process (an older build, the sqlite3 shell) may be
//     opening it at this moment, and one using it would go on writing a log no one else
//     sees.
//
// Not refused: a log that is not settled and that no process uses for another file. That is
// the log a process left when it stopped (killed, its machine down), which holds this file's
// latest decisions, or, when the file was moved away after that and another moved here (or
// this one moved back after it was used elsewhere: its name unrecorded, a holder killed
// before its first checkpoint under it), a log of another file or an older one of this file:
// nothing cheap tells these apart, and refusing the first would stop every restart after a
// crash. The old-name check (checkOldNames) refuses the moved file while such a log is left
// beside a name it remembers.
func checkOwnLog(path string) error {
	real := realPath(path)
	log := real + "-wal"
	if foreign := foreignLogUser(real); foreign != 0 {
		return &FileError{Path: path,
			Problem: fmt.Sprintf("is not the file whose write-ahead log is beside it (%s): process %d uses that log for the file it opened under this name, which is no longer here (this file was moved or put here while that process kept its own open); SQLite would apply that file's log to this one", log, foreign),
			Advice:  "stop that process (closing the ledger, it copies its log into its own file, wherever that is now, and marks the log settled); then remove the old log as the refusal of this name will say; nothing was changed"}
	}
	fi, err := os.Stat(log)
	if err != nil || fi.Size() == 0 {
		return nil
	}
	ok, stamp := settled(log, fi)
	if !ok {
		return nil
	}
	if ours, err := os.Stat(real); err == nil && stamp != "" && stamp == fileStamp(ours) {
		return nil // the very file it was copied into, unchanged since: the log holds nothing it lacks
	}
	return &FileError{Path: path,
		Problem: fmt.Sprintf("has an old write-ahead log beside it (%s, %d bytes) that was already copied into a ledger file that had moved away from this name (%s says so), and this file is another one or not known to be unchanged since (used under another name, say): SQLite would apply that old log over this file's newer pages, and decisions recorded since would be answered as new calls", log, fi.Size(), settledMark(log)),
		Advice:  fmt.Sprintf("stop every effectfence process that uses this name; once nothing has the old log open (fuser %s), remove it with its index and its mark (rm %s %s-shm %s): every record in it is in the file it was copied into; nothing was changed", log, log, real, settledMark(log))}
}
