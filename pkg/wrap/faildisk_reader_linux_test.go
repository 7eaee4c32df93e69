package wrap_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
	_ "modernc.org/sqlite"
)

// TestReceiptsBesideAReaderOfAFailedCommitsFrames: fsyncgate as in
// TestReceiptsOnAFailedCommitsFramesOutliveTheCache, but the first process to open the ledger
// after the kill is a reader (this test's process, read-only, as a `ledger ls` or an export
// opens it), and it holds its read transaction while the next wrap starts: that wrap finds
// another process using the ledger's index and does not copy the log into the file (sqlite's
// syncLog leaves the log to the processes beside it). The reader's open rebuilt the index from
// the log as the page cache holds it, the failed COMMIT's frames included. The wrap records a
// call on top of them and is killed; the reader ends; the disk is unmounted and mounted again
// (the cache gone). Before 2026-12-07's evening the call the wrap answered as recorded was
// then lost with the frames: check found the log "damaged at frame 20 ... transactions
// committed after it (frames 29 and 34) are whole", and the next wrap refused to start. Now
// the wrap is refused while the reader holds the index (sqlite's logOnDisk: the index counts
// frames a read past the page cache does not find), starts once the reader is gone, copying
// the log into the file, and its receipts stay: replayed, not run again, and check finds the
// ledger whole.
func TestReceiptsBesideAReaderOfAFailedCommitsFrames(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	disk := diskfull.MountFailing(t, "ext4", "errors=continue", true)
	r.ledger = filepath.Join(disk.Dir, "ledger.db")
	w := r.wrap("--lease-secs", "2")
	first := call(t, w.Session, "charge", `{"amount":1,"order":"before"}`)
	if first.IsError || r.effectCount() != 1 {
		t.Fatalf("the first call: %s, %d effects", first.text(), r.effectCount())
	}

	disk.Break()
	during := `{"amount":1,"order":"during"}`
	got := make(chan result, 1)
	go func() {
		x, err := callE(w.Session, "charge", during)
		if err == nil {
			got <- x
		}
	}()
	claimFailed := false
	waitFor(t, "the call's claim refused, or its outcome held", func() bool {
		select {
		case x := <-got:
			if !x.IsError || !strings.Contains(x.text(), "NOT executed") || r.effectCount() != 1 {
				t.Fatalf("a call while the device fails: %s, %d effects; want it refused, not executed, or its answer held", x.text(), r.effectCount())
			}
			claimFailed = true
			return true
		default:
		}
		return strings.Contains(w.log.String(), "the call's answer waits until one of them takes it")
	})
	t.Logf("the failed COMMIT was the call's claim's: %v", claimFailed)
	if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	disk.Mend()
	if opts := disk.Options(); strings.Contains(opts, "emergency_ro") || disk.ReadOnly() {
		t.Fatalf("the file system turned read-only (%s): the journal was meant to keep working", opts)
	}

	// A reader opens the ledger first, and holds a read transaction across the wrap's start.
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+r.ledger+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rtx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rtx.QueryRowContext(ctx, "SELECT count(*) FROM records").Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("the reader counts %d record(s)", n)

	// The wrap must not build on frames the disk does not hold: refused while the reader
	// holds the index the reader rebuilt, it starts once the reader is gone, and its open
	// copies the log into the file.
	endReader := func() {
		rtx.Rollback()
		db.Close()
	}
	w2, err := r.tryWrap("--lease-secs", "2")
	if err == nil {
		t.Errorf("a wrap beside a reader whose index counts frames the disk does not hold started; want it refused")
	} else {
		if msg := err.Error(); !strings.Contains(msg, "ledger "+r.ledger) || !strings.Contains(msg, "but the disk holds") || !strings.Contains(msg, "nothing was changed") {
			t.Errorf("the wrap beside the reader was refused, saying: %v; want it to name the ledger and the frames the disk does not hold", err)
		}
		endReader()
		w2 = r.wrap("--lease-secs", "2")
	}
	effects := r.effectCount()
	after := call(t, w2.Session, "charge", `{"amount":1,"order":"after"}`)
	if after.IsError || r.effectCount() != effects+1 {
		t.Fatalf("a new call beside the reader: %s, %d effects, want it run and %d", after.text(), r.effectCount(), effects+1)
	}
	again := call(t, w2.Session, "charge", during)
	t.Logf("the call made while the device failed, beside the reader: replayed %v, isError %v: %s", again.replayed(), again.IsError, again.text())
	if err := syscall.Kill(w2.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w2.Done()
	endReader()
	effects = r.effectCount()

	disk.Repair() // unmounted: the page cache's copies are gone
	if check := ledgerCmd(t, r, "check"); check.err != nil {
		t.Errorf("ledger check once the disk was mounted again: %v\n%s", check.err, check.out)
	}
	w3, err := r.tryWrap("--lease-secs", "2")
	if err != nil {
		t.Fatalf("a wrap once the disk was mounted again: %v", err)
	}
	if x := call(t, w3.Session, "charge", `{"amount":1,"order":"after"}`); !x.replayed() || x.same() != after.same() || r.effectCount() != effects {
		t.Errorf("the call the second wrap recorded beside the reader, after the cache was gone: replayed %v, %s; %d effects, want the recorded result and %d", x.replayed(), x.text(), r.effectCount(), effects)
	}
	if x := call(t, w3.Session, "charge", `{"amount":1,"order":"before"}`); !x.replayed() || x.same() != first.same() {
		t.Errorf("the first call: replayed %v, %s", x.replayed(), x.text())
	}
}
