//go:build unix

package fence

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSpoolFilesOnlyTheOwnerReads: docs/privacy.md says a spooled outcome waits with its whole
// result, a hash-only claim's too; like the ledger, only its user may read it. Under an umask
// that takes nothing away (000), the spool directory and every directory made for it are 0700,
// and the outcome's file 0600. (Not parallel: the umask is the process's.)
func TestSpoolFilesOnlyTheOwnerReads(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	root := t.TempDir()
	dir := filepath.Join(root, "state", "spool", "0123456789abcdef")
	var s spool
	file, err := s.put(dir, Outcome{Kind: OutcomeCommit, Ticket: Ticket{Intent: "key:1", Token: 1, KeepHash: true}, Result: []byte(`{"key":"sk_live_x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(root, "state"), filepath.Join(root, "state", "spool"), dir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("directory %s: %v %v; want 0700", d, fi.Mode().Perm(), err)
		}
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("spool file %s: %v %v; want 0600", file, fi.Mode().Perm(), err)
	}
}
