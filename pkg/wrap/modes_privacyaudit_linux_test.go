package wrap_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestNamedLedgerInASharedDirectoryOnlyTheUserReads: docs/privacy.md, "A ledger you name
// elsewhere is created 0600 too (an existing directory's mode is left alone), and so are its
// write-ahead log and shared-memory files, the spool's files (in 0700 directories) and the
// copy a process makes of everything it holds when its ledger file is moved or deleted while
// in use", and "an outcome ... waits in the local spool with its whole result, for a
// keep-result hash claim too, until a process records it and removes the file". A real wrap
// process under umask 000 (which takes nothing away) keeps a named ledger in a directory its
// user shares (0755). The ledger is moved aside while a keep-result hash call runs, so the
// outcome waits in the spool and the process makes its rescued copy; it is put back and a
// duplicate records the spooled outcome. Every file beside the ledger is 0600 and every
// directory made for it 0700, the shared directory keeps its mode, and once the spool is
// drained no file there holds the result.
func TestNamedLedgerInASharedDirectoryOnlyTheUserReads(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	shared := filepath.Join(r.dir, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o755); err != nil { // whatever the test's umask
		t.Fatal(err)
	}
	r.ledger = filepath.Join(shared, "ledger.db")
	r.prefix = []string{"sh", "-c", `umask 000 && exec "$0" "$@"`}
	flags := []string{"--lease-secs", "1", "--keep-result", "slow=hash"}
	a := r.wrap(flags...)

	// check walks the shared directory: it keeps its mode, every directory under it is 0700,
	// every file 0600.
	check := func(when string, want ...string) { checkPrivateTree(t, shared, 0o755, when, want...) }

	check("while wrap runs", "ledger.db", "ledger.db-wal", "ledger.db-shm")
	args, first, away := spooledCall(t, r, a, "sharedmodes")
	// The result's own bytes: the server's clock in nanoseconds, in no other answer.
	secret := regexp.MustCompile(`t=[0-9]{12,}`).FindString(first.text())
	if secret == "" {
		t.Fatalf("the result has no mark to look for: %s", first.text())
	}
	spool := r.ledger + ".spool"
	files, err := fence.SpoolFiles(spool)
	if err != nil || len(files) != 1 {
		t.Fatalf("spool %s: %v, %v; want the call's outcome; log:\n%s", spool, files, err, a.log.String())
	}
	if b, err := os.ReadFile(filepath.Join(spool, files[0])); err != nil || !bytes.Contains(b, []byte(secret)) {
		t.Fatalf("the spooled outcome (%v) does not hold the whole result, as docs/privacy.md says: the search below proves nothing", err)
	}
	check("with the outcome in the spool", ".spool", ".json")
	if err := os.Rename(away, r.ledger); err != nil {
		t.Fatal(err)
	}
	dup := call(t, a.Session, "slow", args)
	if !dup.replayed() || string(dup.Meta["effectfence/result_not_kept"]) != "true" || strings.Contains(dup.text(), secret) || r.effectCount() != 1 {
		t.Fatalf("the duplicate of a hash-only call with its outcome in the spool: replayed %v, %s; %d executions; log:\n%s",
			dup.replayed(), dup.text(), r.effectCount(), a.log.String())
	}
	if files, _ := fence.SpoolFiles(spool); len(files) != 0 {
		t.Errorf("spool still holds %v after the outcome was recorded", files)
	}
	a.Close()
	check("after wrap stopped", "ledger.db", ".rescued-")
	_ = filepath.WalkDir(shared, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); holds(b, secret) {
				t.Errorf("%s holds the result of a keep-result hash call", p)
			}
		}
		return nil
	})
}
