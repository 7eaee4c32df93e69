package store_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A copy of a SQLite ledger taken as docs/ledger.md says (SQLite's backup, here VACUUM INTO)
// while a claim is in flight, opened under its own name (an operator's look at the backup)
// while that claim's commit waits in the spool of the original, which is still at its name
// and in use: the copy remembers the original's name and holds the same claim, but the
// outcome is the original's, whose processes drain it. Before, the copy was refused, its
// advice being to move the original's outcomes beside the copy: done, the original's claim
// lost its commit (and a re-run-safe one was freed to run again).
func TestCopyOfALedgerOpensBesideTheOriginalsSpool(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	backup := filepath.Join(dir, "backup.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds := &fencetest.DownStore{Store: st}
	eng := fence.New(ds, fence.Config{SpoolDir: path + ".spool", LeaseTTL: time.Hour})
	defer eng.Close()
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "charge:copied", Tool: "charge", Args: []byte(`{}`), RerunSafe: true})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", backup); err != nil {
		t.Fatal(err)
	}
	db.Close()
	spoolWithTheLedgerDown(t, eng, ds, *adm.Ticket, `"ch_1"`)

	l, err := store.Open(ctx, store.Options{Ledger: backup, Existing: true, KeepEvents: true})
	if err != nil {
		t.Fatalf("opening the copy: %v", err)
	}
	l.Close()
	if files, _ := fence.SpoolFiles(path + ".spool"); len(files) != 1 {
		t.Fatalf("the original's spool holds %v after the copy was opened; want its commit still there", files)
	}
	ds.Down.Store(false)
	if _, err := eng.DrainSpool(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s, err := eng.Status(ctx, "charge:copied"); err != nil || s.State != fence.StateDone {
		t.Fatalf("the original: %s %v; want its spooled commit recorded", s.State, err)
	}
}
