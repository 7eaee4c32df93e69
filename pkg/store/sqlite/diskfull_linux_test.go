package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestSettleOutlastsAFullDisk: an outcome that meets a full disk (SQLite cannot grow its
// write-ahead log, and the spool on the same file system cannot take the outcome either) is
// retried until the disk has room again, and then recorded; the duplicate replays it.
// RELIABILITY.md promises Settle keeps trying while the ledger does not answer, a full disk
// included.
func TestSettleOutlastsAFullDisk(t *testing.T) {
	dir := diskfull.Mount(t, 8<<20)
	path := filepath.Join(dir, "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng := fence.New(st, fence.Config{SpoolDir: path + ".spool"})
	req := fence.Request{Intent: "charge:full-disk", Tool: "charge", Args: []byte(`{"amount":4900}`)}
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("claim: %+v, %v", adm, err)
	}
	// A result larger than anything the log has room for already: its frames need new blocks.
	result := []byte(`{"receipt":"` + strings.Repeat("r", 512<<10) + `"}`)
	filler := diskfull.Fill(t, dir)

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
	dir := diskfull.Mount(t, 8<<20)
	path := filepath.Join(dir, "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng := fence.New(st, fence.Config{SpoolDir: path + ".spool"})
	req := fence.Request{Intent: "charge:held", Tool: "charge", Args: []byte(`{"amount":4900}`)}
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("claim: %+v, %v", adm, err)
	}
	result := []byte(`{"receipt":"` + strings.Repeat("r", 512<<10) + `"}`)
	filler := diskfull.Fill(t, dir)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = eng.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: result})
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
