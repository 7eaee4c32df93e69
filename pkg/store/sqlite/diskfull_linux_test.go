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
