//go:build unix

package wrap_test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestLedgerFilesOnlyTheUserReadsUnderAnOpenUmask: docs/privacy.md, "the default ledger file is
// created 0600 in a 0700 directory, so only your user can read it". A real wrap process started
// under umask 000 (which takes nothing away from the modes files are created with) makes its
// default ledger: the state directories it creates are 0700, and every file beside the ledger
// (the database, its WAL, its shared-memory file, the writers' queue lock) is 0600, looked at
// while wrap runs (the -shm file exists only then) and after it stopped.
func TestLedgerFilesOnlyTheUserReadsUnderAnOpenUmask(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.ledger = "" // the default file, under XDG_STATE_HOME
	r.prefix = []string{"sh", "-c", `umask 000 && exec "$0" "$@"`}
	w := r.wrap("--keep-result", "charge=hash")
	if res := call(t, w.Session, "charge", `{"amount":1,"order":"modes"}`); res.IsError {
		t.Fatalf("charge: %+v", res)
	}
	if res := call(t, w.Session, "die", `{"tag":"modes"}`); !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	state := filepath.Join(r.dir, "state")
	check := func(when string, want ...string) {
		t.Helper()
		seen := map[string]bool{}
		err := filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			perm := fi.Mode().Perm()
			switch {
			case d.IsDir() && perm != 0o700:
				t.Errorf("%s: directory %s has mode %v; want 0700", when, p, perm)
			case !d.IsDir() && perm != 0o600:
				t.Errorf("%s: file %s has mode %v; want 0600", when, p, perm)
			}
			for _, suffix := range want {
				if strings.HasSuffix(p, suffix) {
					seen[suffix] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, suffix := range want {
			if !seen[suffix] {
				t.Errorf("%s: no file ending in %q under %s (the test looks at nothing)", when, suffix, state)
			}
		}
	}
	check("while wrap runs", ".db", ".db-wal", ".db-shm")
	w.Close()
	check("after wrap stopped", ".db")
}
