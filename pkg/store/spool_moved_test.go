package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A SQLite ledger moved aside while a holder's commit waits in the spool beside its old name,
// and a new ledger made at that name (the next wrap using the default ledger makes one): the
// new ledger's open drained the commit into itself, which refused it as a claim it never made,
// and deleted the file. The moved ledger, opened under its new name, found no outcome waiting
// beside its old one, so its re-run-safe claim was freed and the effect open to run again. The
// drain now leaves an outcome of an intent the ledger has no trace of (no record, no event),
// and names it; moved beside the moved ledger, as the refusal says, it is recorded there.
func TestSpoolOfAMovedLedgerIsNotDrainedIntoANewOneAtItsName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	aside := filepath.Join(dir, "aside.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds := &fencetest.DownStore{Store: st}
	eng := fence.New(ds, fence.Config{SpoolDir: path + ".spool", Owner: deadOwner(t)})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "charge:moved", Tool: "charge", Args: []byte(`{}`), RerunSafe: true})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	spoolWithTheLedgerDown(t, eng, ds, *adm.Ticket, `"ch_moved"`)
	ds.Down.Store(false)
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Rename(path+suffix, aside+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}

	// A new ledger at the old name.
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err == nil {
		l.Close()
	}
	files, _ := fence.SpoolFiles(path + ".spool")
	if len(files) != 1 {
		t.Fatalf("the spool beside the old name holds %v after a new ledger was opened there (open: %v); want the moved ledger's commit still waiting", files, err)
	}
	if err == nil || !strings.Contains(err.Error(), files[0]) {
		t.Errorf("opening a new ledger beside another's outcome: %v; want a refusal naming %s", err, files[0])
	}

	// The moved ledger is refused until the outcome is beside its name; then it records it.
	if l, err := store.Open(ctx, store.Options{Ledger: aside}); err == nil {
		l.Close()
		t.Fatal("the moved ledger opened while its outcome waits beside its old name")
	}
	if err := os.MkdirAll(aside+".spool", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(path+".spool", files[0]), filepath.Join(aside+".spool", files[0])); err != nil {
		t.Fatal(err)
	}
	l, err = store.Open(ctx, store.Options{Ledger: aside})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if s, err := l.Status(ctx, "charge:moved"); err != nil || s.State != fence.StateDone || string(s.Cert.Result) != `"ch_moved"` {
		t.Fatalf("the moved ledger: %s %v; want its spooled commit recorded", s.State, err)
	}
}
