package sqlite_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestLedgerMovedWhileInUse: an operator moves a ledger aside while a process still has it
// open (and that process's latest records are only in the write-ahead log beside the old
// path). A new process at the path must not create a ledger there: SQLite would delete the
// log, losing the receipts, and the two processes would fence on two ledgers. It refuses,
// saying what happened, and creates nothing; `ledger check` says the same; once the moved
// file is back, its receipts replay. Before, the new process deleted the log and neither
// file held the receipt.
func TestLedgerMovedWhileInUse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	h, hash := committedHolder(t, path, "moved:1")
	moved := path + ".moved"
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(ctx, path, sqlite.Options{})
	var fe *sqlite.FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "write-ahead log") || !strings.Contains(err.Error(), "put the moved file back") || !strings.Contains(err.Error(), "mv "+path+"-wal NEW-wal") {
		t.Fatalf("opening the path of a ledger moved while in use: %v; want it refused, saying why", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused open left a file at the path: %v", err)
	}
	rep, err := sqlite.Check(ctx, path)
	if err != nil || rep.OK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "moved or deleted while a process had it open") {
		t.Fatalf("ledger check of the path: %+v, %v", rep, err)
	}
	if err := h.in.Close(); err != nil { // the holder ends, closing its store
		t.Fatal(err)
	}
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	// The other way out the advice gives, on a copy: the log and its index follow the moved
	// file, which then holds the receipt, and a new ledger starts at the path.
	other := t.TempDir()
	for _, suffix := range []string{"-wal", "-shm"} {
		copyFile(t, path+suffix, filepath.Join(other, "ledger.db.moved"+suffix))
	}
	copyFile(t, moved, filepath.Join(other, "ledger.db.moved"))
	fresh := fence.New(openT(t, filepath.Join(other, "ledger.db"), sqlite.Options{}), fence.Config{})
	if adm, err := fresh.Prepare(ctx, holderReq("moved:1")); err != nil || !adm.Fresh() {
		t.Fatalf("a new ledger beside the moved one: fresh %v, %v", adm.Fresh(), err)
	}
	aside := fence.New(openT(t, filepath.Join(other, "ledger.db.moved"), sqlite.Options{}), fence.Config{})
	if adm, err := aside.Prepare(ctx, holderReq("moved:1")); err != nil || adm.Fresh() || adm.Cert.Hash != hash {
		t.Fatalf("the moved file with its log: fresh %v, %v; want the holder's receipt %s", adm.Fresh(), err, hash)
	}

	if err := os.Rename(moved, path); err != nil {
		t.Fatal(err)
	}
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	adm, err := eng.Prepare(ctx, holderReq("moved:1"))
	if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
		t.Fatalf("after the file was put back: fresh %v, %v; want the holder's receipt %s", adm.Fresh(), err, hash)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStoreRefusesWritesOnceItsFileIsGone: a process whose ledger file is moved or deleted
// under it (the path names another file, or none) records nothing more there: what it wrote
// would be seen by no other process, and a deleted file's records end with the process. Its
// first write after copies everything it holds to a file beside the path, which the error
// names, and from which the receipts replay.
func TestStoreRefusesWritesOnceItsFileIsGone(t *testing.T) {
	for _, how := range []string{"moved", "deleted", "replaced"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.db")
			st := openT(t, path, sqlite.Options{})
			eng := fence.New(st, fence.Config{})
			done := holderReq("gone:done")
			adm, err := eng.Prepare(ctx, done)
			if err != nil || !adm.Fresh() {
				t.Fatal(adm, err)
			}
			cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":1}`))
			if err != nil {
				t.Fatal(err)
			}
			switch how {
			case "moved":
				err = os.Rename(path, path+".aside")
			case "deleted":
				err = os.Remove(path)
			case "replaced":
				err = errors.Join(os.Rename(path, path+".aside"), os.WriteFile(path, nil, 0o600))
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = eng.Prepare(ctx, holderReq("gone:new"))
			var fe *sqlite.FileError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), "moved, replaced or deleted while in use") || fence.CodeOf(err) != fence.CodeStore {
				t.Fatalf("a claim once the file was %s: %v; want it refused as a store error", how, err)
			}
			copies, _ := filepath.Glob(path + ".rescued-*")
			if len(copies) != 1 || !strings.Contains(err.Error(), copies[0]) {
				t.Fatalf("copies %v; the error: %v", copies, err)
			}
			if _, again := eng.Prepare(ctx, holderReq("gone:other")); again == nil || again.Error() != err.Error() {
				t.Fatalf("the next write: %v; want the same refusal", again)
			}
			rescued := fence.New(openT(t, copies[0], sqlite.Options{}), fence.Config{})
			if adm, err := rescued.Prepare(ctx, done); err != nil || adm.Fresh() || adm.Cert.Hash != cert.Hash {
				t.Fatalf("the copy: fresh %v, %v; want the receipt %s", adm.Fresh(), err, cert.Hash)
			}
			if rec, err := rescued.Status(ctx, "gone:new"); err != nil || rec.State != fence.StateNone {
				t.Fatalf("the refused claim in the copy: %v, %v", rec.State, err)
			}
		})
	}
}

// TestStoreWritesAgainOnceItsFileIsBack: the refusal lasts while the path does not name the
// store's file; put back, the store writes again (and the copy was made once).
func TestStoreWritesAgainOnceItsFileIsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	if err := os.Rename(path, path+".aside"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := eng.Prepare(ctx, holderReq("back:1")); err == nil {
			t.Fatal("a claim while the file was away was taken")
		}
	}
	if err := os.Rename(path+".aside", path); err != nil {
		t.Fatal(err)
	}
	if adm, err := eng.Prepare(ctx, holderReq("back:1")); err != nil || !adm.Fresh() {
		t.Fatalf("a claim once the file was back: %v", err)
	}
	if copies, _ := filepath.Glob(path + ".rescued-*"); len(copies) != 1 {
		t.Fatalf("copies %v, want one", copies)
	}
}
