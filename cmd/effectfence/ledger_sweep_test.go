package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerSweepCountsWhatItDropped records done outcomes that expire at once, then runs
// `ledger sweep` on the ledger (SQLite and PostgreSQL): it must report every outcome it
// dropped. Opening the ledger sweeps it (the ledger commands sweep before they answer), so a
// count of the explicit sweep alone said "swept 0" after dropping them all.
func TestLedgerSweepCountsWhatItDropped(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				loc = pgLedger(t)
			}
			ctx := context.Background()
			// Results kept for a millisecond; no background sweep while this seeds.
			l, err := store.Open(ctx, store.Options{Ledger: loc, ResultTTL: time.Millisecond, SweepEvery: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			const n = 5
			for i := range n {
				adm, err := l.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("expiring:%d", i), Tool: "send", Args: []byte(`{}`)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Commit(ctx, *adm.Ticket, []byte(`"sent"`)); err != nil {
					t.Fatal(err)
				}
			}
			adm, err := l.Prepare(ctx, fence.Request{Intent: "fenced", Tool: "send", Args: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Abort(ctx, *adm.Ticket, "timeout"); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			var out struct{ Swept int }
			code, stdout, stderr := runCLI(t, "", "ledger", "sweep", "--ledger", loc, "--json")
			if code != exitOK || json.Unmarshal([]byte(stdout), &out) != nil || out.Swept != n {
				t.Fatalf("ledger sweep --json = %d %s %s; want %d swept", code, stdout, stderr, n)
			}
			code, stdout, _ = runCLI(t, "", "ledger", "ls", "--ledger", loc)
			if code != exitOK || !strings.Contains(stdout, "1 intent(s)") || !strings.Contains(stdout, "fenced") {
				t.Fatalf("ls after the sweep = %d %s", code, stdout)
			}
		})
	}
}

// TestLedgerSubcommandsRefuseANonLedgerAsUsage gives every ledger subcommand a ledger string
// that names no supported ledger: each exits 2 (usage, docs/ledger.md: bad flags or
// arguments) with the supported forms, and writes nothing to stdout. `check` exited 1.
func TestLedgerSubcommandsRefuseANonLedgerAsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"ls"}, {"show", "x"}, {"clear", "x", "--reason", "r"}, {"resolve", "x", "--did-not-happen", "--reason", "r"},
		{"verify"}, {"export"}, {"stats"}, {"sweep"}, {"check"},
	} {
		for _, ledger := range []string{"redis://localhost:6379", "Memory"} {
			all := append(append([]string{"ledger"}, args...), "--ledger", ledger)
			code, stdout, stderr := runCLI(t, "", all...)
			if code != exitUsage || stdout != "" || !strings.Contains(stderr, "supported forms") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d naming the supported forms", all, code, stdout, stderr, exitUsage)
			}
		}
	}
}

// TestLedgerLookAtAnEmptyFileCreatesNothing points every ledger subcommand that opens the
// ledger at an empty file (touched, or emptied): SQLite reads it as an empty database, and
// the look made it a ledger and reported "0 intent(s)", nothing fenced. docs/ledger.md: an
// operator's look never creates a ledger and never reads a mistyped one as empty. Each exits 1
// with nothing on stdout, and the file stays empty with nothing beside it.
func TestLedgerLookAtAnEmptyFileCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ls"}, {"show", "x"}, {"clear", "x", "--reason", "r"}, {"resolve", "x", "--did-not-happen", "--reason", "r"},
		{"verify"}, {"export"}, {"stats"}, {"sweep"},
	} {
		all := append(append([]string{"ledger"}, args...), "--ledger", path)
		code, stdout, stderr := runCLI(t, "", all...)
		if code != exitError || stdout != "" || !strings.Contains(stderr, "the file is empty") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d saying the file is empty", all, code, stdout, stderr, exitError)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
			t.Fatalf("%v changed the empty file (%v)", all, err)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Errorf("files beside the empty ledger: %v (%v)", ents, err)
	}
	// Emptied after use (its writers' queue file beside it): the look says a ledger was here,
	// and the ways out, not "nothing has used it yet".
	if err := os.WriteFile(path+"-lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "", "ledger", "ls", "--ledger", path)
	if code != exitError || stdout != "" || !strings.Contains(stderr, "was emptied") || !strings.Contains(stderr, "remove "+path+"-lock") {
		t.Errorf("ledger ls of an emptied ledger: exit %d, stdout %q, stderr %q; want exit %d naming the emptied ledger and the ways out", code, stdout, stderr, exitError)
	}
}
