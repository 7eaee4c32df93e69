//go:build unix

package wrap_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLedgerDirectoryRemovedUnderWrapKeepsItsReceipts: the directory of a real wrap's SQLite
// ledger is removed whole while wrap runs (rm -r: the file, its log, its index, its spool).
// docs/ledger.md says a ledger deleted under a process is copied, receipts and all, to
// FILE.rescued-PID-TIME beside the path, and the error names the copy: here too, though no
// directory is left to put it in. A new call is refused, not run; a duplicate of the recorded
// call replays it; once wrap is stopped and the copy is used as the ledger, the recorded call
// replays in a new wrap and the refused one runs, once. Before 2026-12-07 the copy failed (no
// such directory), the advice was to put back a file that no longer existed, and the recorded
// call ran again in a wrap started once the directory was made again.
func TestLedgerDirectoryRemovedUnderWrapKeepsItsReceipts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	dir := filepath.Join(r.dir, "ledgers")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r.ledger = filepath.Join(dir, "ledger.db")
	w := r.wrap()
	first := call(t, w.Session, "charge", `{"amount":1,"order":"kept"}`)
	if first.IsError || r.effectCount() != 1 {
		t.Fatalf("the first call: %s, %d effects", first.text(), r.effectCount())
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	x := call(t, w.Session, "charge", `{"amount":1,"order":"after"}`)
	if !x.IsError || !strings.Contains(x.text(), "NOT executed") || r.effectCount() != 1 {
		t.Fatalf("a call after the directory was removed: %s (isError %v), %d effects; want it refused, not run", x.text(), x.IsError, r.effectCount())
	}
	copyPath := regexp.MustCompile(`\S+\.rescued-\d+-\d{8}T\d{6}Z`).FindString(x.text())
	if copyPath == "" {
		t.Fatalf("the refusal names no copy of the ledger: %s", x.text())
	}
	if !strings.Contains(x.text(), "made again") {
		t.Errorf("the refusal does not say the directory was made again: %s", x.text())
	}
	if _, err := os.Stat(copyPath); err != nil {
		t.Fatalf("the copy the refusal names: %v; refusal: %s", err, x.text())
	}
	if again := call(t, w.Session, "charge", `{"amount":1,"order":"kept"}`); !again.replayed() || again.same() != first.same() {
		t.Errorf("the recorded call's duplicate: replayed %v, %s", again.replayed(), again.text())
	}
	w.Close()
	<-w.Done()

	// As the refusal advises: the copy becomes the ledger.
	if err := os.Rename(copyPath, r.ledger); err != nil {
		t.Fatal(err)
	}
	w2 := r.wrap()
	if x := call(t, w2.Session, "charge", `{"amount":1,"order":"kept"}`); !x.replayed() || x.same() != first.same() || r.effectCount() != 1 {
		t.Errorf("the recorded call in a wrap on the copy: replayed %v, %s; %d effects, want a replay and 1", x.replayed(), x.text(), r.effectCount())
	}
	if x := call(t, w2.Session, "charge", `{"amount":1,"order":"after"}`); x.IsError || r.effectCount() != 2 {
		t.Errorf("the refused call in a wrap on the copy: %s; %d effects, want it run and 2", x.text(), r.effectCount())
	}
}
