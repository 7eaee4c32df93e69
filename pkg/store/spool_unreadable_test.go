package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// docs/RELIABILITY.md: "A spool file the engine cannot read is never deleted; the drain
// reports it." Two outcomes wait in a SQLite ledger's spool, written there by Settle while the
// ledger failed; one of the files is then torn. The next process opening the ledger records
// the readable one and refuses to start, naming the torn file and what to do with it, which
// stays byte for byte (it may be the only record of an effect that ran). Once a person has
// moved it away, the ledger opens, and the intent whose outcome it held is still fenced,
// never free.
func TestUnreadableSpoolFileIsKeptAndNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	spool, err := store.SpoolDir(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds := &fencetest.DownStore{Store: st}
	eng := fence.New(ds, fence.Config{SpoolDir: spool})
	spoolCommit := func(intent, result string) string {
		t.Helper()
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":1}`)})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare %s: %+v %v", intent, adm, err)
		}
		defer ds.Down.Store(false)
		return spoolWithTheLedgerDown(t, eng, ds, *adm.Ticket, result)
	}
	good := spoolCommit("charge:good", `"ch_good"`)
	torn := spoolCommit("charge:torn", `"ch_torn"`)
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(torn)
	if err != nil {
		t.Fatal(err)
	}
	b = b[:len(b)/2]
	if err := os.WriteFile(torn, b, 0o600); err != nil {
		t.Fatal(err)
	}

	for range 2 { // and again: nothing about the file changes with each try
		_, err = store.Open(ctx, store.Options{Ledger: path})
		if err == nil || !strings.Contains(err.Error(), torn) || !strings.Contains(err.Error(), "move it away") {
			t.Fatalf("open with a torn spool file: %v; want a refusal naming %s and what to do", err, torn)
		}
		if after, rerr := os.ReadFile(torn); rerr != nil || !bytes.Equal(after, b) {
			t.Fatalf("the torn spool file was changed or deleted (%v)", rerr)
		}
	}
	if _, err := os.Stat(good); !os.IsNotExist(err) {
		t.Fatalf("the readable outcome is still in the spool (%v); want it recorded", err)
	}

	// A person reads the torn file and moves it away: the ledger opens, the readable outcome
	// is recorded, and the other intent is not free.
	if err := os.Rename(torn, filepath.Join(t.TempDir(), "torn.json")); err != nil {
		t.Fatal(err)
	}
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatalf("open once the torn file was moved away: %v", err)
	}
	defer l.Close()
	if s, err := l.Status(ctx, "charge:good"); err != nil || s.State != fence.StateDone || string(s.Cert.Result) != `"ch_good"` {
		t.Fatalf("charge:good after the drain: %+v %v; want done with its result", s, err)
	}
	if _, err := l.Prepare(ctx, fence.Request{Intent: "charge:torn", Tool: "charge", Args: []byte(`{"amount":1}`)}); fence.CodeOf(err) != "intent_in_flight" && fence.CodeOf(err) != "prior_failure" {
		t.Fatalf("charge:torn, its outcome in the file moved away: %v; want it still fenced", err)
	}
}

// A spool file that reads as JSON but is no outcome this build can record (its kind edited,
// or written by a build that knows another kind) is as unreadable as a torn one: the ledger
// refuses it as invalid input, which is no answer about the outcome. Before, the drain took
// that refusal for the ledger's answer and deleted the file, and with it perhaps the only
// record of an effect that ran. Now it is kept byte for byte, and the open refuses, naming it.
func TestSpoolFileOfNoKnownKindIsKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	spool, err := store.SpoolDir(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds := &fencetest.DownStore{Store: st}
	eng := fence.New(ds, fence.Config{SpoolDir: spool})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "charge:edited", Tool: "charge", Args: []byte(`{"amount":1}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	spooled := spoolWithTheLedgerDown(t, eng, ds, *adm.Ticket, `"ch_edited"`)
	ds.Down.Store(false)
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(spooled)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`"kind":"commit"`), []byte(`"kind":"refund"`), 1)
	if !bytes.Contains(b, []byte(`"kind":"refund"`)) {
		t.Fatalf("spool file without the kind to edit: %s", b)
	}
	if err := os.WriteFile(spooled, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = store.Open(ctx, store.Options{Ledger: path})
	if err == nil || !strings.Contains(err.Error(), spooled) || !strings.Contains(err.Error(), "move it away") {
		t.Fatalf("open with a spool file of an unknown kind: %v; want a refusal naming %s and what to do", err, spooled)
	}
	if after, rerr := os.ReadFile(spooled); rerr != nil || !bytes.Equal(after, b) {
		t.Fatalf("the spool file of an unknown kind was changed or deleted (%v)", rerr)
	}
}
