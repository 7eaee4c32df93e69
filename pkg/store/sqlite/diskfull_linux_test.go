package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestSettleOutlastsAFullDisk: an outcome that meets a full disk (SQLite cannot grow its
// write-ahead log, and the spool on the same file system cannot take the outcome either) is
// retried until the disk has room again, and then recorded; the duplicate replays it.
// RELIABILITY.md promises Settle keeps trying while the ledger does not answer, a full disk
// included.
func TestSettleOutlastsAFullDisk(t *testing.T) {
	d := claimThenFill(t, "charge:full-disk")
	eng, req, adm, result, filler := d.eng, d.req, d.adm, d.result, d.filler

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type settled struct {
		cert *fence.Cert
		err  error
	}
	done := make(chan settled, 1)
	go func() {
		cert, err := eng.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: result})
		done <- settled{cert, err}
	}()
	select {
	case s := <-done:
		t.Fatalf("Settle returned while the disk was full: %v, %v; want it to keep trying", s.cert != nil, s.err)
	case <-time.After(time.Second):
	}
	if rec, err := eng.Status(ctx, req.Intent); err != nil || rec.State != fence.StateInFlight {
		t.Fatalf("while the disk is full: %v, %v; want the claim still in flight", rec.State, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil || s.cert == nil || string(s.cert.Result) != string(result) {
		t.Fatalf("Settle once the disk had room: cert %v, %v", s.cert != nil, s.err)
	}
	again, err := eng.Prepare(ctx, req)
	if err != nil || again.Fresh() || again.Cert == nil || string(again.Cert.Result) != string(result) {
		t.Fatalf("the duplicate: fresh %v, %v; want the recorded result replayed", again.Fresh(), err)
	}
}

// TestHeldOutcomeRecordedByRecover: an outcome neither the ledger nor the spool could take
// before Settle's context ended (the disk stayed full) is held in memory, and the next
// Recover once the disk has room records it: the duplicate replays it instead of finding
// the claim in flight (and, once this process ends, unknown).
func TestHeldOutcomeRecordedByRecover(t *testing.T) {
	d := claimThenFill(t, "charge:held")
	eng, req, adm, result, filler, path := d.eng, d.req, d.adm, d.result, d.filler, d.path
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := eng.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: result})
	if err == nil || !strings.Contains(err.Error(), "held in this process's memory") {
		t.Fatalf("Settle on a full disk: %v; want the outcome held in memory", err)
	}
	if _, err := eng.Recover(ctx); err == nil {
		t.Fatal("Recover on a full disk reported nothing")
	}
	if rec, err := eng.Status(ctx, req.Intent); err != nil || rec.State != fence.StateInFlight {
		t.Fatalf("while the disk is full: %v, %v; want the claim still in flight", rec.State, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Recover(ctx); err != nil {
		t.Fatalf("Recover once the disk had room: %v", err)
	}
	again, err := eng.Prepare(ctx, req)
	if err != nil || again.Fresh() || again.Cert == nil || string(again.Cert.Result) != string(result) {
		t.Fatalf("the duplicate: fresh %v, %v; want the held result replayed", again.Fresh(), err)
	}
	if files, err := fence.SpoolFiles(path + ".spool"); err != nil || len(files) != 0 {
		t.Fatalf("spool after: %v, %v; want it empty", files, err)
	}
}

// fullDisk is a SQLite ledger on a disk of its own, with a claim made and then the disk
// filled.
type fullDisk struct {
	eng    *fence.Engine
	path   string // the ledger
	req    fence.Request
	adm    fence.Admission
	result []byte // a result larger than anything the log has room for: its frames need new blocks
	filler string // remove it to make room
}

func claimThenFill(t *testing.T, intent string) fullDisk {
	t.Helper()
	dir := diskfull.Mount(t, 8<<20)
	d := fullDisk{path: filepath.Join(dir, "ledger.db"), req: fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":4900}`)}}
	st, err := sqlite.Open(ctx, d.path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d.eng = fence.New(st, fence.Config{SpoolDir: d.path + ".spool"})
	if d.adm, err = d.eng.Prepare(ctx, d.req); err != nil || !d.adm.Fresh() {
		t.Fatalf("claim: %+v, %v", d.adm, err)
	}
	d.result = []byte(`{"receipt":"` + strings.Repeat("r", 512<<10) + `"}`)
	d.filler = diskfull.Fill(t, dir)
	return d
}
