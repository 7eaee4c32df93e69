package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
)

// A ticket naming an intent no claim can have (not UTF-8, a NUL byte, longer than
// MaxIntentLen: Prepare refuses such a request) holds nothing, and every ledger answers its
// report lease_lost, as for any ticket that holds no claim. A PostgreSQL ledger refused it
// with its own error instead (invalid byte sequence for encoding "UTF8"), which Settle took
// for the ledger failing: the outcome was answered as kept in the spool ("will be recorded")
// though nothing could ever record it, and every drain named its file from then on. serve
// reads tickets from its agents, so an agent's "\u0000" in one did that.
func TestTicketOfAnIntentNoClaimCanHaveIsLeaseLost(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	ledgers := map[string]string{"memory": "memory", "sqlite": filepath.Join(t.TempDir(), "l.db")}
	if os.Getenv("EFFECTFENCE_TEST_POSTGRES") != "" {
		ledgers["postgres"] = pgtest.Ledger(t, "badticket")
	}
	for name, loc := range ledgers {
		t.Run(name, func(t *testing.T) {
			l, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, intent := range []string{"charge:\x00", "charge:\xff", strings.Repeat("i", fence.MaxIntentLen+1)} {
				tk := fence.Ticket{Intent: intent, Token: 7, Nonce: "0123456789abcdef0123456789abcdef"}
				shown := intent[:min(len(intent), 12)]
				if _, err := l.Commit(ctx, tk, []byte(`"ok"`)); !errors.Is(err, fence.ErrLeaseLost) {
					t.Errorf("commit of a ticket of %q: %v; want lease_lost", shown, err)
				}
				for _, k := range []fence.OutcomeKind{fence.OutcomeCommit, fence.OutcomeRelease, fence.OutcomeAbort, fence.OutcomeLost} {
					sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
					_, err := l.Settle(sctx, fence.Outcome{Kind: k, Ticket: tk, Result: []byte(`"ok"`), Reason: "r"})
					cancel()
					if !errors.Is(err, fence.ErrLeaseLost) {
						t.Errorf("settle (%s) of a ticket of %q: %v; want lease_lost", k, shown, err)
					}
				}
				if _, err := l.Heartbeat(ctx, tk); !errors.Is(err, fence.ErrLeaseLost) {
					t.Errorf("heartbeat of a ticket of %q: %v; want lease_lost", shown, err)
				}
			}
			if n, err := l.DrainSpool(ctx); n != 0 || err != nil {
				t.Errorf("drain: %d %v; want nothing kept in the spool", n, err)
			}
		})
	}
}

// TestClaimOfAnOlderBuildWithANulIsRecorded: until 2026-12-02 Prepare admitted an intent with a
// NUL byte, and a SQLite ledger holds such claims. The outcome of one, kept in the spool by
// that build and drained by this one (or reported by a holder across the upgrade), is the
// claim's: it must be recorded. It was refused lease_lost ("no claim can have that intent")
// without the ledger being asked, the spool file deleted as answered, and the effect's result
// lost, the claim left in flight to be fenced as unknown.
func TestClaimOfAnOlderBuildWithANulIsRecorded(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	l, err := store.Open(ctx, store.Options{Ledger: filepath.Join(t.TempDir(), "l.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	adm, err := l.Prepare(ctx, fence.Request{Intent: "charge:template", Tool: "charge", Args: []byte(`{"usd":5}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	const intent = "charge:\x00old"
	err = l.Store().Update(ctx, func(tx fence.Tx) error {
		rec, err := tx.Get(adm.Ticket.Intent)
		if err != nil || rec == nil {
			return fmt.Errorf("template claim: %+v %v", rec, err)
		}
		old := *rec
		old.Intent = intent // as an older build wrote it
		return tx.Put(&old)
	})
	if err != nil {
		t.Fatal(err)
	}
	tk := *adm.Ticket
	tk.Intent = intent
	c, err := l.Commit(ctx, tk, []byte(`"charged"`))
	if err != nil || c == nil || c.Intent != intent {
		t.Fatalf("commit of the older build's claim: %+v %v; want it recorded", c, err)
	}
	rec, err := l.Status(ctx, intent)
	if err != nil || rec.State != fence.StateDone {
		t.Fatalf("%q: %+v %v; want done", intent, rec, err)
	}
}
