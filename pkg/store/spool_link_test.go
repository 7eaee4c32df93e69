package store_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A ledger reached through a symbolic link to its file has the file's spool (SQLite follows
// the link, so the link is no name of its own), and outcomes that an earlier build kept
// beside the link's name are recorded when the ledger is opened through the link: nothing
// else reads them.
func TestSpoolOfALinkIsTheFilesAndTheOldOneIsDrained(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	link := filepath.Join(dir, "link.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(path, link); err != nil {
		st.Close()
		t.Skipf("no symbolic links here: %v", err)
	}
	if a, _ := store.SpoolDir(link); a != path+".spool" {
		t.Fatalf("SpoolDir(link) = %s; want the file's, %s.spool", a, path)
	}

	// An earlier build, through the link, spooled a commit beside the link's name.
	ds := &fencetest.DownStore{Store: st}
	eng := fence.New(ds, fence.Config{SpoolDir: link + ".spool"})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "charge:linked", Tool: "charge", Args: []byte(`{"amount":1}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	spoolWithTheLedgerDown(t, eng, ds, *adm.Ticket, `"ch_linked"`)
	ds.Down.Store(false)
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}

	l, err := store.Open(ctx, store.Options{Ledger: link})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if s, err := l.Status(ctx, "charge:linked"); err != nil || s.State != fence.StateDone || string(s.Cert.Result) != `"ch_linked"` {
		t.Fatalf("after opening through the link: %+v %v; want the spooled commit recorded", s, err)
	}
	if files, err := fence.SpoolFiles(link + ".spool"); err != nil || len(files) != 0 {
		t.Fatalf("the old spool beside the link still holds %v (%v)", files, err)
	}
}
