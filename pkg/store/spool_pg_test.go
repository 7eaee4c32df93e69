package store_test

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
)

// deadOwner names a process of this host that is gone: this very pid with another start
// time, which the judge reads as a pid reused.
func deadOwner(t *testing.T) string {
	t.Helper()
	parts := strings.Split(fence.LocalOwner(), "/")
	if len(parts) != 5 || parts[2] == "0" {
		t.Skipf("this platform records no start time (owner %q): no holder can be judged dead", fence.LocalOwner())
	}
	parts[2] += "1"
	return strings.Join(parts, "/")
}

// docs/RELIABILITY.md, rule 1: a dead holder's re-run-safe claim is not taken over while an
// outcome of the intent waits in this host's spool. A PostgreSQL ledger's spool was named
// after the URL as written, so two processes of one host writing one ledger's URL two ways
// (postgresql:// and postgres://, localhost and 127.0.0.1, parameters in another order) had
// two spools: the second took over a claim whose commit waited in the first's, and the effect
// ran again. The spool is now the ledger's own, named by an id kept in the ledger.
func TestPostgresSpoolIsTheLedgersWhateverItsURL(t *testing.T) {
	url := pgtest.Ledger(t, "spoolurl")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	other := "postgresql://" + strings.TrimPrefix(url, "postgres://")
	if other == url {
		t.Fatalf("ledger URL %q does not start with postgres://", url)
	}

	// The holder: a process of this host, gone once its commit waits in the spool.
	l, err := store.Open(ctx, store.Options{Ledger: url})
	if err != nil {
		t.Fatal(err)
	}
	spool := l.Config().SpoolDir
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	spoolDeadCommit(t, url, spool, "charge:spelled", `"ch_spelled"`)

	// Another process of this host, the ledger's URL spelled its own way, re-run safe too.
	l2, err := store.Open(ctx, store.Options{Ledger: other, OnLeaseExpiry: fence.Reclaim})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.Config().SpoolDir != spool {
		t.Errorf("spool of %s is %s; of %s, %s: one ledger, two spools", other, l2.Config().SpoolDir, url, spool)
	}
	a, err := l2.Prepare(ctx, fence.Request{Intent: "charge:spelled", Tool: "charge", Args: []byte(`{"amount":1}`), RerunSafe: true})
	if err != nil || a.Fresh() || a.Cert == nil || string(a.Cert.Result) != `"ch_spelled"` {
		t.Fatalf("a duplicate after the commit spooled under the other spelling: %+v %v; want the recorded result, never a second run", a, err)
	}
}

// spoolDeadCommit claims intent re-run safe in the ledger at url as a process of this host
// that is gone, and leaves its commit of result in the spool dir, as a holder does whose
// ledger failed at the commit and which died before the drain.
func spoolDeadCommit(t *testing.T, url, spool, intent, result string) {
	t.Helper()
	st, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	ds := &fencetest.DownStore{Store: st}
	eng := fence.New(ds, fence.Config{SpoolDir: spool, Owner: deadOwner(t), OnLeaseExpiry: fence.Reclaim})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":1}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	spoolWithTheLedgerDown(t, eng, ds, *adm.Ticket, result)
	ds.Down.Store(false)
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
}

// Outcomes an earlier build kept in the spool named after the URL as written are recorded
// when the ledger is next opened: no engine reads that spool any more.
func TestPostgresSpoolNamedAfterTheURLIsDrained(t *testing.T) {
	url := pgtest.Ledger(t, "spoolold")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	l, err := store.Open(ctx, store.Options{Ledger: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	old, err := store.SpoolDir(url)
	if err != nil {
		t.Fatal(err)
	}
	spoolDeadCommit(t, url, old, "charge:old-spool", `"ch_old"`)
	l, err = store.Open(ctx, store.Options{Ledger: url, OnLeaseExpiry: fence.Reclaim})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Config().SpoolDir == old {
		t.Fatalf("the spool is still named after the URL: %s", old)
	}
	if s, err := l.Status(ctx, "charge:old-spool"); err != nil || s.State != fence.StateDone || string(s.Cert.Result) != `"ch_old"` {
		t.Fatalf("after the open: %+v %v; want the commit from the old spool recorded", s, err)
	}
	if files, err := fence.SpoolFiles(old); err != nil || len(files) != 0 {
		t.Fatalf("the old spool still holds %v (%v)", files, err)
	}
}
