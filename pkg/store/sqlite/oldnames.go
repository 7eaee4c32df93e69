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
	t := s.turns.enter(s.opt.BusyTimeout)
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
		if settled(old+"-wal", log) {
			continue
		}
		return &FileError{Path: path,
			Problem: fmt.Sprintf("was used under the name %s, and the write-ahead log left beside that name (%s-wal, %d bytes) may hold decisions this file lacks: the file was moved (or given this name) after a process using the old name stopped without copying its log in (killed, or its machine went down)", old, old, log.Size()),
			Advice:  fmt.Sprintf("stop every effectfence process that uses either name; then put the file back at %s (its log applies on the next open), or move the log and its index beside this name (mv %s-wal %s-wal; mv %s-shm %s-shm), which keeps every decision; nothing was changed", old, old, name, old, name)}
	}
	return nil
}

// settledMark names the file that says a write-ahead log was copied into its ledger file
// completely after the file moved away from the log's name: its content is the log's size and
// modification time then. A log that changed since is not settled.
func settledMark(log string) string { return log + ".settled" }

// settled says whether the log at path, as fi describes it, is the one a process marked
// settled.
func settled(path string, fi os.FileInfo) bool {
	b, err := os.ReadFile(settledMark(path))
	return err == nil && strings.TrimSpace(string(b)) == logStamp(fi)
}

func logStamp(fi os.FileInfo) string {
	return fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
}

// markSettled records that the log beside name was copied completely into the ledger file,
// which has moved from name (see settledMark). Best effort: without the mark, a process
// opening the moved file refuses until the log is moved beside it.
func markSettled(name string) {
	log := name + "-wal"
	fi, err := os.Stat(log)
	if err != nil {
		return
	}
	_ = os.WriteFile(settledMark(log), []byte(logStamp(fi)+"\n"), 0o600)
}
