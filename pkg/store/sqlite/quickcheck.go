package sqlite

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

// quickCheck runs PRAGMA integrity_check before the ledger is written to and refuses a file
// that fails it: a write through a damaged index can put a record where a later lookup never
// finds it, and a lookup that misses a done intent runs it again. Every lookup of an intent,
// Recover's of the claims in flight and the sweep's of expired records go through an index, so
// an index must hold exactly its table's rows, which only integrity_check verifies. Until
// 2026-12-06 this was PRAGMA quick_check, which verifies every page, record and b-tree and how
// many entries each index has, but not that they are its table's: a torn ledger whose index of
// intents held an older version of a page (a write lost on its way to the disk, a copy taken
// while a checkpoint wrote the file: as many entries, one of an intent cleared since in place
// of a done one's) passed it, opened for writing, and admitted that done call's duplicate as
// new, to run a second time (TestLedgerWhoseIntentIndexLostAWriteIsRefused). It reads the whole
// file once and looks each row up in each of its table's indexes, the most of an open's cost
// on a large ledger, views' included (every `ledger` command but `check`, which reads the file
// read-only, opens for writing): on 100k done records the size of wrap's (a 213 MB file in the
// page cache) integrity_check took 0.37-0.39 s where quick_check took 0.17-0.23 s, run one
// after the other through this driver on a shared 2-core machine (BenchmarkOpen measures the
// open; without either check it takes a few milliseconds). Those records' intents were in
// rowid order; wrap's are hashes, so integrity_check's lookups of each row in the index of
// intents land on random pages: 1.77 s against quick_check's 0.55 s on 100k of them.
//
// The check therefore reads the file through a memory map (mmapSizeForCheck), which SQLite
// turns off again once it is done: a lookup reads a page already in the kernel's cache in
// place, where through the connection's 2 MB page cache, which the table's pages stream
// through, nearly every lookup read its pages again with a system call. It is the same check,
// every row looked up in every index, at about quick_check's cost (0.61 s on those 100k; the
// figures for 1M in docs/DECISIONS-sqlite.md). Cheaper checks were measured and rejected
// there: integrity_check of the records table alone saves only the small tables' share and
// skips the file-wide checks (pages used twice, the free list), and quick_check plus
// fingerprints of the table and its indexes read the table twice, costing about as much.
func (s *Store) quickCheck(ctx context.Context) (err error) {
	// A page the kernel cannot read (an I/O error, the file cut short by another program)
	// is a fault where a read would have returned an error: the check turns it into a
	// refusal instead of a crash of the process. Nothing is written either way.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if f, ok := r.(interface{ Addr() uintptr }); ok {
			err = &FileError{Path: s.path, Problem: fmt.Sprintf("could not be read for SQLite's integrity check (a fault reading its page at %#x through the map: an I/O error, or the file cut short while it was read), so effectfence will not write to it", f.Addr())}
			return
		}
		panic(r)
	}()
	if _, err := s.w.ExecContext(ctx, fmt.Sprintf("PRAGMA mmap_size = %d", mmapSizeForCheck)); err != nil {
		return err
	}
	if testHookChecking != nil {
		testHookChecking()
	}
	problems, err := s.checkLines(ctx, "PRAGMA integrity_check(20)")
	// Unmapped again whatever the check found: the ledger's reads and writes go through the
	// page cache as before (a write never goes through the map: SQLite maps for reading).
	if _, uerr := s.w.ExecContext(context.WithoutCancel(ctx), "PRAGMA mmap_size = 0"); uerr != nil && err == nil {
		return uerr
	}
	if err != nil {
		// integrity_check stops at a page it cannot follow (SQLITE_CORRUPT, where quick_check
		// reports the page and goes on): quick_check names what is wrong, when it can.
		found, qerr := s.checkLines(ctx, "PRAGMA quick_check(20)")
		if qerr != nil || len(found) == 0 {
			return err
		}
		problems = found
	}
	if len(problems) > 0 {
		return &FileError{Path: s.path, Problem: fmt.Sprintf("fails SQLite's integrity check (%s), so effectfence will not write to it", strings.Join(problems, "; "))}
	}
	return nil
}

// testHookChecking, when set, runs as the integrity check starts (tests only).
var testHookChecking func()

// mmapSizeForCheck is how much of the file the integrity check maps: all of it; SQLite caps
// it at its build's limit (SQLITE_MAX_MMAP_SIZE) and reads the rest as before.
const mmapSizeForCheck = 1 << 40

// checkLines runs a checking pragma and returns the lines it printed other than "ok".
func (s *Store) checkLines(ctx context.Context, pragma string) ([]string, error) {
	rows, err := s.w.QueryContext(ctx, pragma)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, err
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	return problems, rows.Err()
}
