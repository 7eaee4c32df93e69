package sqlite_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// The store is a fence.WriteFirst store, and a write transaction that writes nothing costs no
// durable write: an engine that has not seen an intent recorded (here a second engine on the
// same file, as a second process would be) answers its replay from the writer, and the WAL
// does not grow.
func TestWriteFirstReplayWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	st := openT(t, path, sqlite.Options{})
	if wf, ok := fence.Store(st).(fence.WriteFirst); !ok || !wf.WriteFirst() {
		t.Fatal("the SQLite store is not a fence.WriteFirst store")
	}
	req := fence.Request{Intent: "wf:1", Tool: "charge_card", Args: []byte(`{"amount":1}`), Agent: "a"}
	first := fence.New(st, fence.Config{})
	adm, err := first.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("first attempt: %+v %v", adm, err)
	}
	if _, err := first.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	walSize := func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := walSize()
	second := fence.New(st, fence.Config{})
	for range 3 {
		adm, err := second.Prepare(ctx, req)
		if err != nil || adm.Fresh() || adm.Cert == nil || string(adm.Cert.Result) != `{"ok":true}` {
			t.Fatalf("replay: %+v %v", adm, err)
		}
	}
	if after := walSize(); after != before {
		t.Fatalf("replays grew the WAL from %d to %d bytes: a write transaction that wrote nothing was made durable", before, after)
	}
}
