package sqlite_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestExportAtRestOpenedMeanwhileHasNoEndLine: an export of a ledger read at rest (ledger
// export on a full disk) during which a process opened the ledger and wrote in it may mix two
// of its states. Its end line says it is whole, so it must not get one: it fails as an export
// cut short does, and verify --export says so. Without the look before the end line (the
// views look once done), the export got its end line and verified.
func TestExportAtRestOpenedMeanwhileHasNoEndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedLedger(t, path, 3)
	at, err := sqlite.Open(ctx, path, sqlite.Options{Existing: true, AtRest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	var whole bytes.Buffer
	if _, err := ledger.Export(ctx, at, &whole); err != nil || !strings.Contains(whole.String(), `"end":{"records":3`) {
		t.Fatalf("an export read at rest, nothing else on the ledger: %v\n%s", err, whole.String())
	}

	w, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Update(ctx, func(tx fence.Tx) error {
		return tx.Put(&fence.Record{Intent: "meanwhile", State: fence.StateFailed, Tool: "t"})
	}); err != nil {
		t.Fatal(err)
	}
	var mixed bytes.Buffer
	n, err := ledger.Export(ctx, at, &mixed)
	if err == nil || !strings.Contains(err.Error(), "while it was read") || strings.Contains(mixed.String(), `"end"`) || n != 3 {
		t.Errorf("an export read at rest while a process wrote the ledger: %d line(s), %v; want an error, the 3 records read and no end line\n%s", n, err, mixed.String())
	}
	rep, err := ledger.VerifyExport(&mixed)
	if err != nil || rep.OK() {
		t.Errorf("verify of that export: %v, %+v; want it not whole", err, rep)
	}
}
