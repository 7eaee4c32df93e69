package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerCommandsKeepTheAuditTrailWhateverTheirResultTTL records a done and a fenced
// intent under an engine that keeps results and events for an hour, then runs every ledger
// command that opens the ledger with EFFECTFENCE_RESULT_TTL_SECS=1 in its own environment
// (SQLite and PostgreSQL). The ledger's retention is that of the processes that record its
// calls: a look (ls, show, verify, export, stats) or a clear must not drop their audit events,
// and before, each did, at open, all but clears and resolves older than its own TTL (the abort
// that fenced an intent included, so `show` printed no audit trail for it). `ledger sweep`
// drops expired outcomes; events only when the operator gives it a retention of its own.
// The done record stays replayed throughout: its expiry was set when it was recorded.
func TestLedgerCommandsKeepTheAuditTrailWhateverTheirResultTTL(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Setenv("XDG_STATE_HOME", t.TempDir()) // the PostgreSQL spool
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				loc = pgLedger(t)
			}
			ctx := context.Background()
			open := func() *store.Ledger {
				t.Helper()
				l, err := store.Open(ctx, store.Options{Ledger: loc, ResultTTL: time.Hour, SweepEvery: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			req := func(intent string) fence.Request {
				return fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":5}`)}
			}
			l := open()
			adm, err := l.Prepare(ctx, req("pay:done"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Commit(ctx, *adm.Ticket, []byte(`"ch_1"`)); err != nil {
				t.Fatal(err)
			}
			if adm, err = l.Prepare(ctx, req("pay:fenced")); err != nil {
				t.Fatal(err)
			}
			if err := l.Abort(ctx, *adm.Ticket, "timeout"); err != nil {
				t.Fatal(err)
			}
			if adm, err = l.Prepare(ctx, req("pay:cleared")); err != nil {
				t.Fatal(err)
			}
			if err := l.Abort(ctx, *adm.Ticket, "timeout"); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// events counts the audit events of intent, read by an engine keeping them an hour.
			events := func(intent string) int {
				t.Helper()
				l := open()
				defer l.Close()
				d, err := ledger.ShowLast(ctx, l.Store(), intent, 0)
				if err != nil {
					t.Fatal(err)
				}
				return len(d.Events)
			}
			if n := events("pay:fenced"); n != 1 {
				t.Fatalf("pay:fenced has %d audit events after its abort; want 1", n)
			}
			time.Sleep(1100 * time.Millisecond) // older than the commands' TTL, younger than the ledger's

			t.Setenv(store.EnvTTLSecs, "1")
			for _, args := range [][]string{
				{"ls"}, {"show", "pay:fenced"}, {"verify"}, {"export"}, {"stats"},
				{"clear", "pay:cleared", "--reason", "checked: never charged"}, {"sweep"},
			} {
				code, stdout, stderr := runCLI(t, "", append(append([]string{"ledger"}, args...), "--ledger", loc)...)
				if code != exitOK {
					t.Fatalf("ledger %v: exit %d\n%s%s", args, code, stdout, stderr)
				}
				if n := events("pay:fenced"); n != 1 {
					t.Fatalf("after `ledger %v` with %s=1, pay:fenced has %d audit events; want its abort kept (the ledger keeps events an hour)", args, store.EnvTTLSecs, n)
				}
			}
			l = open()
			got, err := l.Prepare(ctx, req("pay:done"))
			l.Close()
			if err != nil || got.Fresh() || got.Cert == nil || string(got.Cert.Result) != `"ch_1"` {
				t.Fatalf("a duplicate of pay:done after the ledger commands: %+v, %v; want its recorded result replayed", got, err)
			}

			// Given a retention of its own, `ledger sweep` drops them.
			code, stdout, stderr := runCLI(t, "", "ledger", "sweep", "--ledger", loc, "--events-older-than-secs", "1")
			if code != exitOK {
				t.Fatalf("ledger sweep --events-older-than-secs 1: exit %d\n%s%s", code, stdout, stderr)
			}
			if n := events("pay:fenced"); n != 0 {
				t.Fatalf("after `ledger sweep --events-older-than-secs 1`, pay:fenced has %d audit events; want none", n)
			}
			if n := events("pay:cleared"); n != 1 {
				t.Fatalf("pay:cleared has %d audit events after the sweeps; want its clear, kept for good", n)
			}
		})
	}
}
