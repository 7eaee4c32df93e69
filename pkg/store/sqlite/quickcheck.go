package sqlite

import (
	"context"
	"fmt"
	"strings"
)

// quickCheck runs PRAGMA quick_check before the ledger is written to and refuses a file that
// fails it: a write through a damaged index can put a record where a later lookup never finds
// it, and a lookup that misses a done intent runs it again. quick_check verifies every page,
// record and b-tree of the file but not that each index agrees with its table (that is
// integrity_check, which `effectfence ledger check` runs); it reads the whole file once. That
// is the most of an open's cost on a large ledger, views' included (every `ledger` command but
// `check`, which reads the file read-only, opens for writing): 100k done records the size of wrap's make a 213 MB file, opened in
// 0.33-0.39 s with the check and 2.3-3.4 ms without (BenchmarkOpen, the thirty-fifth
// session's VM, the file in the page cache; its records were 0.35 KB before, and the figure
// given here "a few tens of milliseconds").
func (s *Store) quickCheck(ctx context.Context) error {
	rows, err := s.w.QueryContext(ctx, "PRAGMA quick_check(20)")
	if err != nil {
		return err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(problems) > 0 {
		return &FileError{Path: s.path, Problem: fmt.Sprintf("fails SQLite's quick integrity check (%s), so effectfence will not write to it", strings.Join(problems, "; "))}
	}
	return nil
}
