package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestSweptRecordsLeaveNoBytesInTheFile: once the sweep has deleted an expired outcome and
// the log is checkpointed, the ledger file holds none of its bytes: not in the free space of
// the pages its row shared with others (a small call), not in the freed overflow pages of a
// large call's arguments (record_args) or of its large result. Without secure_delete they
// stayed in the file's free pages until SQLite reused them (docs/privacy.md).
func TestSweptRecordsLeaveNoBytesInTheFile(t *testing.T) {
	ctx := context.Background()
	path, eng := newLedgerWith(t, fence.Config{ResultTTL: time.Millisecond})
	marks := map[string]string{}
	decide := func(intent string, argBytes, resultBytes int) {
		mark := func(what string, n int) string {
			m := fmt.Sprintf("secret-%s-%s-", intent, what)
			marks[intent+" "+what] = m
			return strings.Repeat(m, max(1, n/len(m)))
		}
		args := []byte(fmt.Sprintf(`{"card":%q}`, mark("args", argBytes)))
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge_card", Args: args, Agent: "t"})
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		if _, err := eng.Commit(ctx, *adm.Ticket, []byte(fmt.Sprintf(`{"receipt":%q}`, mark("result", resultBytes)))); err != nil {
			t.Fatal(err)
		}
	}
	// Neighbours keep the pages of the swept records in use, as a live ledger's do.
	for i := range 40 {
		if _, err := eng.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("keep:%02d", i), Tool: "t", Args: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	decide("small", 300, 300)
	decide("large", 64<<10, 64<<10)
	decide("mixed", 300, 64<<10)
	time.Sleep(10 * time.Millisecond)
	if n, err := eng.Sweep(ctx); err != nil || n != 3 {
		t.Fatalf("swept %d, %v; want 3", n, err)
	}
	file := OnDisk(t, path)
	for what, m := range marks {
		if i := bytes.Index(file, []byte(m)); i >= 0 {
			t.Errorf("the %s of a swept record is still in the ledger file, at byte %d", what, i)
		}
	}
	if !bytes.Contains(file, []byte("keep:39")) {
		t.Fatal("the file does not hold the records that were kept: the search proves nothing")
	}
}

// TestEveryWriterConnectionDeletesSecurely: the store opens its writer's connection again
// after a goroutine ended inside its transaction, and such a connection has only what the
// data source name sets: secure_delete must be among it, not only set by the migration that
// the first connection ran (which restores it too).
func TestEveryWriterConnectionDeletesSecurely(t *testing.T) {
	path, _ := newLedger(t)
	db, err := sql.Open("sqlite", dsn(path, Options{BusyTimeout: time.Second}, true))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var on int
	if err := db.QueryRow("PRAGMA secure_delete").Scan(&on); err != nil || on != 1 {
		t.Fatalf("a new writer connection: secure_delete = %d (%v); want 1", on, err)
	}
}

// OnDisk checkpoints the ledger at path from a connection of its own, emptying its log (the
// log's frames hold pages until a checkpoint copies them into the file and the log starts
// again), and returns the bytes of the file and of what is left of the log: what a later
// reader of the disk finds. Exported for the external tests of this package.
func OnDisk(t *testing.T, path string) []byte {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var busy, logged, done int
	if err := db.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &done); err != nil || busy != 0 {
		t.Fatalf("checkpoint: busy %d, %v", busy, err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if wal, err := os.ReadFile(path + "-wal"); err == nil {
		file = append(file, wal...)
	}
	return file
}

// TestSweepBatchIsBounded: one SweepExpired deletes at most sweepBatch records, whatever the
// engine asks for, and says there may be more; the engine's sweep goes on to the last.
func TestSweepBatchIsBounded(t *testing.T) {
	ctx := context.Background()
	_, eng := newLedgerWith(t, fence.Config{ResultTTL: time.Millisecond})
	st := eng.Store()
	const expired = sweepBatch*2 + 7
	for i := range expired {
		decide(t, eng, fmt.Sprintf("old:%03d", i), []byte(`{}`))
	}
	time.Sleep(10 * time.Millisecond)
	err := st.Update(ctx, func(tx fence.Tx) error {
		n, more, err := tx.(fence.ExpiredSweeper).SweepExpired(tx.Now(), 1000)
		if err == nil && (n != sweepBatch || !more) {
			t.Errorf("one batch asked for 1000 swept %d (more: %v); want %d and more", n, more, sweepBatch)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := eng.Sweep(ctx); err != nil || n != expired-sweepBatch {
		t.Fatalf("the sweep after it swept %d, %v; want %d", n, err, expired-sweepBatch)
	}
}
