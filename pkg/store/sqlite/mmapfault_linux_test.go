package sqlite_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestFileCutShortUnderTheChecksMapIsRefused: the open's integrity check reads the file
// through a memory map, where a page the kernel cannot give (here: the file cut short by
// another program while the check reads it; an I/O error alike) is a SIGBUS, not a read that
// fails. The check turns it into a refusal; before, with no map, the read failed with an
// error. Either way the open is refused, nothing written, and the process goes on.
func TestFileCutShortUnderTheChecksMapIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, path, sqlite.Options{})
	pad := strings.Repeat("lorem ipsum dolor sit amet ", 15)
	err := st.Update(ctx, func(tx fence.Tx) error {
		now := tx.Now()
		for i := range 5000 {
			intent := fmt.Sprintf("wrap:create_entities:%x", sha256.Sum256(fmt.Appendf(nil, "%d", i)))
			args := fmt.Appendf(nil, `{"observations":[%q]}`, pad)
			rec := &fence.Record{Intent: intent, State: fence.StateDone, Fingerprint: fmt.Sprintf("%064x", i), Token: uint64(i + 1),
				Tool: "create_entities", Args: args, ClaimedAt: now, UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
			if err := tx.Put(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	full := checkpointed(t, path)

	// Cut the file to a tenth of its pages while the check reads it: cut before the check
	// maps the file, the check reads a short file (refused as damaged); cut after it ended, the
	// open succeeds. The cut is made later or sooner until it lands in between.
	defer sqlite.SetTestHookChecking(nil)
	lo, hi := time.Duration(0), 200*time.Millisecond
	for range 12 {
		if err := os.WriteFile(path, full, 0o600); err != nil {
			t.Fatal(err)
		}
		delay := (lo + hi) / 2
		cut := make(chan error, 1)
		sqlite.SetTestHookChecking(func() {
			go func() {
				time.Sleep(delay)
				cut <- os.Truncate(path, int64(len(full)/10/4096*4096))
			}()
		})
		st2, err := sqlite.Open(ctx, path, sqlite.Options{})
		if cerr := <-cut; cerr != nil {
			t.Fatal(cerr)
		}
		if err == nil {
			st2.Close()
			hi = delay // the check ended before the cut
			continue
		}
		var fe *sqlite.FileError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "effectfence ledger check") {
			t.Fatalf("open of the ledger cut short %s into its check: %v; want a refusal with the ledger check hint", delay, err)
		}
		if strings.Contains(err.Error(), "through the map") {
			t.Logf("cut %s into the check: %v", delay, err)
			// The process goes on: the whole file back, the next open checks and writes it.
			sqlite.SetTestHookChecking(nil)
			if err := os.WriteFile(path, full, 0o600); err != nil {
				t.Fatal(err)
			}
			eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
			adm, err := eng.Prepare(ctx, fence.Request{Intent: "after:cut", Tool: "t", Args: []byte(`{}`)})
			if err != nil || !adm.Fresh() {
				t.Fatalf("a call after the refused open: %+v %v; want admitted", adm, err)
			}
			return
		}
		lo = delay // cut before the check read the file: refused as a short file
	}
	t.Skipf("no cut landed while the check read the file through its map (between %s and %s)", lo, hi)
}
