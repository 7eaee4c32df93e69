package store_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A SQLite ledger restored from a copy (docs/ledger.md, "Backups and restores") forgets the
// claims made after the copy was taken, but their holders still run their effects and report
// them. Such a late report is refused lease_lost and kept in the audit trail as a late_result,
// with its result, though it looks like a ticket this ledger never issued: one carries a
// token above every token the restored ledger's sequence has handed out (charge:8), the other
// the token of the restored ledger's own new claim of the same intent with another nonce
// (charge:7, called again after the restore, which runs it a second time, as the docs say).
// These are what a forged ticket looks like too; refusing them without a trace would drop
// the only record that the effect ran before the restore (docs/RELIABILITY.md, "When a late
// result heals an unknown claim"), so the engine cannot tell a forgery by them.
func TestLateReportOfAClaimARestoreForgotIsKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	backup := filepath.Join(dir, "backup.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng := fence.New(st, fence.Config{LeaseTTL: time.Hour})
	prepare := func(eng *fence.Engine, intent string) fence.Ticket {
		t.Helper()
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":5}`)})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare %s: %+v %v", intent, adm, err)
		}
		return *adm.Ticket
	}
	if _, err := eng.Commit(ctx, prepare(eng, "refund:1"), []byte(`"rf_1"`)); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", backup); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Claimed after the copy: their holders run the effects.
	first, other := prepare(eng, "charge:7"), prepare(eng, "charge:8")
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The copy put back in the ledger's place.
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if err := os.Rename(backup, path); err != nil {
		t.Fatal(err)
	}
	st, err = sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng = fence.New(st, fence.Config{LeaseTTL: time.Hour})
	defer eng.Close()
	again := prepare(eng, "charge:7") // the duplicate runs again: the restored ledger forgot
	if again.Token != first.Token || again.Nonce == first.Nonce {
		t.Fatalf("the restored ledger's claim of charge:7 is %d/%s; the premise is its token %d again, with another nonce", again.Token, again.Nonce, first.Token)
	}

	for _, c := range []struct {
		ticket fence.Ticket
		result string
	}{{first, `"ch_first"`}, {other, `"ch_other"`}} {
		_, err := eng.Commit(ctx, c.ticket, []byte(c.result))
		if !errors.Is(err, fence.ErrLeaseLost) {
			t.Fatalf("late commit of %s claim %d: %v; want lease_lost", c.ticket.Intent, c.ticket.Token, err)
		}
		var kept []string
		if err := st.View(ctx, func(tx fence.Tx) error {
			return tx.Events(c.ticket.Intent, func(ev fence.Event) bool {
				if ev.Kind == fence.EventLateResult {
					kept = append(kept, ev.Reason)
				}
				return true
			})
		}); err != nil {
			t.Fatal(err)
		}
		if len(kept) != 1 || !strings.Contains(kept[0], c.result) {
			t.Errorf("the late commit %s of %s claim %d (a claim made before the restore) left late results %q; want it kept", c.result, c.ticket.Intent, c.ticket.Token, kept)
		}
	}
}
