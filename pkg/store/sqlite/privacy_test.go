package sqlite_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestRedactedAndHashOnlyNeverReachTheFile: with a field redacted and only the result's digest
// kept, neither secret is anywhere in the ledger's files (database, WAL), and after a reopen a
// duplicate is told the result was not kept instead of running again.
func TestRedactedAndHashOnlyNeverReachTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	const card, apiKey = "4111111111111111", "sk_live_0123456789abcdef"
	req := fence.Request{Intent: "charge:1", Tool: "charge", Args: []byte(`{"amount":4900,"card":"` + card + `"}`),
		Redact: []string{"card"}, KeepResult: fence.KeepHash}
	st := openT(t, path, sqlite.Options{})
	eng := fence.New(st, fence.Config{})
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1","api_key":"`+apiKey+`"}`)); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ledger.db*"))
	if len(files) == 0 {
		t.Fatal("no ledger files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{card, apiKey} {
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s contains %s", f, secret)
			}
		}
	}
	eng = fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	dup, err := eng.Prepare(ctx, req)
	if err != nil || dup.Fresh() || !dup.ResultNotKept || dup.RecordedAt.IsZero() {
		t.Fatalf("duplicate after reopen: %+v %v", dup, err)
	}
}
