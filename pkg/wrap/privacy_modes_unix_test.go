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
	check := func(when string, want ...string) { checkPrivateTree(t, state, 0o700, when, want...) }
	check("while wrap runs", ".db", ".db-wal", ".db-shm")
	w.Close()
	check("after wrap stopped", ".db")
}

// checkPrivateTree walks root: root has mode rootPerm, every directory under it 0700, every
// file 0600. Each of want must name an entry (the end of its name; a want ending in "-", a part
// of it), else the check would look at nothing.
func checkPrivateTree(t *testing.T, root string, rootPerm fs.FileMode, when string, want ...string) {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		perm := fi.Mode().Perm()
		switch {
		case p == root:
			if perm != rootPerm {
				t.Errorf("%s: %s has mode %v; want %v", when, root, perm, rootPerm)
			}
		case d.IsDir() && perm != 0o700:
			t.Errorf("%s: directory %s has mode %v; want 0700", when, p, perm)
		case !d.IsDir() && perm != 0o600:
			t.Errorf("%s: file %s has mode %v; want 0600", when, p, perm)
		}
		base := filepath.Base(p)
		for _, w := range want {
			if strings.HasSuffix(base, w) || strings.HasSuffix(w, "-") && strings.Contains(base, w) {
				seen[w] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("%s: no entry named with %q under %s (the check looks at nothing)", when, w, root)
		}
	}
}
