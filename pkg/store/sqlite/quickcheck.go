package sqlite

import (
	"context"
	"fmt"
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
// open; without either check it takes a few milliseconds).
func (s *Store) quickCheck(ctx context.Context) error {
	problems, err := s.checkLines(ctx, "PRAGMA integrity_check(20)")
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
