package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestWrapOnADeviceFailingTheLogsCopyIsRefusedAndLosesNothing: the open of a ledger that no
// process has open copies its write-ahead log into the file (sqlite's syncLog). A real wrap
// records calls whose arguments grow the ledger by hundreds of pages, and is killed with
// SIGKILL: its log holds them, the file does not. The device under the ledger's ext4 (its
// journal working, errors=continue: the file system stays writable) then fails every write to
// a block not written before, and a new wrap starts: the copy writes the new pages and its
// fsync fails (EIO). The wrap must refuse to start, naming the ledger and saying the disk fails
// writes and nothing was changed; ls, show and export must still read every receipt (at rest:
// before, every one of them opened the ledger for writing and was refused as the wrap was); and once
// the disk is repaired (e2fsck, mounted again: the page cache's copies of what never reached
// the device are gone), a wrap replays every call, none runs again, and check finds nothing.
func TestWrapOnADeviceFailingTheLogsCopyIsRefusedAndLosesNothing(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	disk := diskfull.MountFailing(t, "ext4", "errors=continue", true)
	dir := t.TempDir() // the wraps' working directory and effects file: not on the failing disk
	ledgerPath := filepath.Join(disk.Dir, "ledger.db")
	effects := filepath.Join(dir, "effects")
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	const calls = 6
	call := func(id, i int) string {
		// 48 KiB of arguments: every call's claim and outcome write new overflow pages.
		name := fmt.Sprintf("event-%d-%s", i, strings.Repeat("x", 48<<10))
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"record_event","arguments":{"name":%q}}}`, id, name)
	}
	answers := func(in io.Writer, sc *bufio.Scanner) []string {
		var got []string
		for i := range calls {
			fmt.Fprintln(in, call(10+i, i))
			if !sc.Scan() {
				t.Fatalf("no answer to call %d", i)
			}
			got = append(got, sc.Text())
		}
		return got
	}

	w, in, sc := startWrapSession(t, dir, "--ledger", ledgerPath, "--", bin, "demo-server", "--effects", effects)
	first := answers(in, sc)
	for i, a := range first {
		if strings.Contains(a, `"isError":true`) || !strings.Contains(a, "recorded") {
			t.Fatalf("call %d: %s; want it recorded", i, a)
		}
	}
	ran := lines(t, effects)
	if err := w.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	if fi, err := os.Stat(ledgerPath + "-wal"); err != nil || fi.Size() < 256<<10 {
		t.Fatalf("the killed wrap's log: %v, %d bytes; want the calls in it (the case tests nothing)", err, fi.Size())
	}
	disk.Break()
	wrap := exec.Command(bin, "wrap", "--ledger", ledgerPath, "--", bin, "demo-server", "--effects", effects)
	wrap.Dir = dir
	wrap.Env = append(os.Environ(), env...)
	out, err := wrap.CombinedOutput()
	t.Logf("the file system once the wrap started: %s", disk.Options())
	if err == nil || !strings.Contains(string(out), "ledger "+ledgerPath) || !strings.Contains(string(out), "the disk fails writes") || !strings.Contains(string(out), "nothing was changed") {
		t.Fatalf("wrap starting while the device fails the log's copy: %v; want it refused, naming the ledger and the failing disk\n%s", err, out)
	}

	// What an operator reads then, at rest: every receipt, as recorded.
	r := runBinary(t, env, "", "ledger", "ls", "--json", "--ledger", ledgerPath)
	var ls struct{ Records []fence.Record }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ls) != nil || !strings.Contains(r.stderr, "read-only") || !strings.Contains(r.stderr, "fails writes") {
		t.Fatalf("ledger ls after the refused open: exit %d; want 0, read at rest and saying why\n%s%s", r.code, r.stdout, r.stderr)
	}
	done := func(got []fence.Record) bool {
		for _, rec := range got {
			if rec.State != fence.StateDone || rec.Cert == nil {
				return false
			}
		}
		return len(got) == calls
	}
	if !done(ls.Records) {
		t.Errorf("ledger ls after the refused open shows %d record(s); want the %d calls done", len(ls.Records), calls)
	}
	shown := ls.Records[len(ls.Records)/2]
	if r := runBinary(t, env, "", "ledger", "show", shown.Intent, "--ledger", ledgerPath); r.code != 0 || !strings.Contains(r.stdout, shown.Cert.Hash) {
		t.Errorf("ledger show %s after the refused open: exit %d; want its receipt\n%s%s", shown.Intent, r.code, r.stdout, r.stderr)
	}
	exported := exportedRecords(t, env, ledgerPath)
	same := func(got []fence.Record) bool {
		return slices.EqualFunc(got, ls.Records, func(a, b fence.Record) bool {
			return a.Intent == b.Intent && a.State == b.State && a.Cert != nil && a.Cert.Hash == b.Cert.Hash
		})
	}
	if !same(exported) {
		t.Errorf("ledger export after the refused open holds %d record(s), not the %d ls shows", len(exported), len(ls.Records))
	}

	disk.Repair() // what never reached the device is gone with the page cache
	if r := runBinary(t, env, "", "ledger", "check", "--ledger", ledgerPath); r.code != 0 {
		t.Errorf("ledger check once the disk was repaired: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	w2, in2, sc2 := startWrapSession(t, dir, "--ledger", ledgerPath, "--", bin, "demo-server", "--effects", effects)
	again := answers(in2, sc2)
	in2.Close()
	_ = w2.Wait()
	for i, a := range again {
		if !strings.Contains(a, "recorded") || strings.Contains(a, `"isError":true`) {
			t.Errorf("call %d once the disk was repaired: %s; want the recorded result replayed", i, a)
		}
	}
	if n := lines(t, effects); n != ran {
		t.Errorf("once the disk was repaired, %d call(s) ran again: want none", n-ran)
	}
	if got := exportedRecords(t, env, ledgerPath); !same(got) || !done(got) {
		t.Errorf("ledger export once the disk was repaired holds %d record(s), not the %d recorded", len(got), calls)
	}
}

// exportedRecords runs `ledger export` of the ledger at path and returns its records, failing
// the test unless it exits 0 with an end line that counts them.
func exportedRecords(t *testing.T, env []string, path string) []fence.Record {
	t.Helper()
	r := runBinary(t, env, "", "ledger", "export", "--ledger", path)
	if r.code != 0 {
		t.Fatalf("ledger export: exit %d\n%s", r.code, r.stderr)
	}
	var records []fence.Record
	var end *ledger.ExportEnd
	for _, s := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var l ledger.ExportLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("an export line: %v: %.200s", err, s)
		}
		if l.Record != nil {
			records = append(records, *l.Record)
		}
		if l.End != nil {
			end = l.End
		}
	}
	if end == nil || end.Records != len(records) {
		t.Fatalf("the export's end line %+v; want it, counting its %d record(s)", end, len(records))
	}
	return records
}
