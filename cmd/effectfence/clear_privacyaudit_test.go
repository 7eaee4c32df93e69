package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestClearedRecordLeavesNoBytesInTheLedgerFile: docs/privacy.md, "SQLite overwrites with
// zeros what a deletion frees (secure_delete), so a swept or cleared record's bytes are gone
// from the ledger file once its write-ahead log has been checkpointed into it; ... (it removes
// the [-wal] file when the last process closes the ledger)". A failed call's record (its
// arguments a card number, once small enough to share a page with its neighbours, once large
// enough for overflow pages) is in the ledger file; the operator clears it with the real
// binary (`effectfence ledger clear`), and then none of its bytes is in the file, and no
// write-ahead log is left beside it.
func TestClearedRecordLeavesNoBytesInTheLedgerFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	// Neighbours keep the pages of the cleared records in use, as a live ledger's do.
	for i := range 40 {
		if _, err := l.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("keep:%02d", i), Tool: "t", Args: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	marks := map[string]string{}
	for intent, size := range map[string]int{"pay:small": 300, "pay:large": 64 << 10} {
		m := "card-4111-" + intent + "-"
		marks[intent] = m
		args := fmt.Sprintf(`{"card":%q}`, strings.Repeat(m, size/len(m)))
		adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(args), Agent: "t"})
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		if err := l.Abort(ctx, *adm.Ticket, "declined by the bank"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for intent, m := range marks {
		if !bytes.Contains(file, []byte(m)) {
			t.Fatalf("the ledger file does not hold %s's arguments before the clear: the test proves nothing", intent)
		}
	}

	env := []string{"NO_COLOR=1"}
	for intent := range marks {
		if r := runBinary(t, env, "", "ledger", "clear", intent, "--reason", "checked with the bank: not charged", "--ledger", path); r.code != exitOK {
			t.Fatalf("ledger clear %s: exit %d\n%s%s", intent, r.code, r.stdout, r.stderr)
		}
	}
	if _, err := os.Stat(path + "-wal"); !os.IsNotExist(err) {
		t.Errorf("a write-ahead log is left beside the ledger after the last process closed it (%v)", err)
	}
	if file, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	for intent, m := range marks {
		if i := bytes.Index(file, []byte(m)); i >= 0 {
			t.Errorf("the arguments of the cleared record %s are still in the ledger file, at byte %d", intent, i)
		}
	}
	if !bytes.Contains(file, []byte("keep:39")) {
		t.Fatal("the file does not hold the records that were kept: the search proves nothing")
	}
}
