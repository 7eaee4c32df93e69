package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerViewsOnAFullDiskWithNoHolder: the operator whose disk filled up is the one who
// must see what is fenced. A SQLite ledger on a small file system of its own, written by real
// wraps: one whose call completed and that closed, then one killed with SIGKILL in the middle
// of its call, which leaves its claim in the log (not yet copied into the file) and the log's
// index beside it. The disk is then filled, and no process has the ledger open. ls, show and
// stats must show both intents, the killed call's claim from the log included, say that they
// read the ledger read-only and why, and change nothing: the file, its log and its index keep
// every byte, and nothing is made beside them. Before, every view opened the ledger for
// writing and failed ("no room left"), leaving an empty log and a torn index behind.
func TestLedgerViewsOnAFullDiskWithNoHolder(t *testing.T) {
	t.Parallel()
	fd := killedOnAFullDisk(t, nil)
	disk, ledger, claim, filler := fd.disk, fd.ledger, fd.claim, fd.filler

	before := filesIn(t, disk)
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	r := runBinary(t, env, "", "ledger", "ls", "--json", "--ledger", ledger)
	var ls struct{ Records []fence.Record }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ls) != nil {
		t.Fatalf("ledger ls on a full disk: exit %d; want 0 and the ledger's records\n%s%s", r.code, r.stdout, r.stderr)
	}
	states := map[string]fence.State{}
	for _, rec := range ls.Records {
		states[rec.Intent] = rec.State
	}
	if len(states) != 2 || states[claim.Intent] != fence.StateInFlight {
		t.Errorf("ledger ls on a full disk shows %v; want the completed call done and the killed one's claim (%s) in flight", states, claim.Intent)
	}
	if n := strings.Count(fmt.Sprint(states), string(fence.StateDone)); n != 1 {
		t.Errorf("ledger ls on a full disk shows %v; want one call done", states)
	}
	for _, args := range [][]string{
		{"ls"},
		{"show", claim.Intent},
		{"stats"},
	} {
		r := runBinary(t, env, "", append(append([]string{"ledger"}, args...), "--ledger", ledger)...)
		if r.code != 0 {
			t.Errorf("ledger %s on a full disk: exit %d; want 0\n%s%s", args[0], r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "read-only") || !strings.Contains(r.stderr, "no room left") || !strings.Contains(r.stderr, "committed frames of its write-ahead log") {
			t.Errorf("ledger %s on a full disk does not say it read the ledger read-only, why, and from its log:\n%s", args[0], r.stderr)
		}
		if args[0] != "stats" && !strings.Contains(r.stdout, claim.Intent) {
			t.Errorf("ledger %s on a full disk does not show the killed call's claim:\n%s", args[0], r.stdout)
		}
		if args[0] == "stats" && !strings.Contains(r.stdout, "│ in_flight │ 1 ") {
			t.Errorf("ledger stats on a full disk does not count the killed call's claim:\n%s", r.stdout)
		}
	}
	if after := filesIn(t, disk); !slices.Equal(before, after) {
		t.Errorf("the views changed what is on the full disk:\nbefore %q\nafter  %q", before, after)
	}

	// The log cut short after the kill (its index counts frames it no longer holds): the view
	// read at rest must refuse as an open does (walLost), not show the ledger without them.
	log, err := os.ReadFile(ledger + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(ledger+"-wal", 32+24+4096); err != nil { // the header and one frame
		t.Fatal(err)
	}
	r = runBinary(t, env, "", "ledger", "ls", "--ledger", ledger)
	if r.code != exitError || !strings.Contains(r.stderr, "cut short") || strings.Contains(r.stdout, claim.Intent) {
		t.Errorf("ledger ls on a full disk of a ledger whose log lost committed frames: exit %d; want 1, naming the loss\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := os.WriteFile(ledger+"-wal", log, 0o600); err != nil {
		t.Fatal(err)
	}

	// With room again, a process that can write opens the ledger: every call is there.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, env, "", "ledger", "ls", "--ledger", ledger); r.code != 0 || !strings.Contains(r.stdout, claim.Intent) || strings.Contains(r.stderr, "read-only") {
		t.Errorf("ledger ls with room again: exit %d; want the killed call's claim, read as usual\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// fullDisk is a SQLite ledger on a full file system of its own, which no process has open.
type fullDisk struct {
	disk, ledger string
	claim        fence.Record // the killed call's, in the log only
	filler       string       // the file that fills the disk: removed, it makes the room again
}

// killedOnAFullDisk writes a SQLite ledger on a small file system of its own with real wraps:
// one whose call completed and that closed, then one killed with SIGKILL in the middle of its
// call, which leaves its claim in the log (not yet copied into the file) and the log's index
// beside it. The disk is then filled. between, if given, runs with the ledger path once the
// first wrap has closed (no process has the ledger open then).
func killedOnAFullDisk(t *testing.T, between func(ledger string)) fullDisk {
	t.Helper()
	bin := effectfence(t)
	disk := diskfull.Mount(t, 4<<20)
	dir := t.TempDir() // the wraps' working directory and effects file: not on the small disk
	ledger := filepath.Join(disk, "ledger.db")
	call := func(amount int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":%d}}}`, amount)
	}

	// A call that completes, in a wrap that then ends as a client closing it ends it.
	first, in, sc := startWrapSession(t, dir, "--ledger", ledger, "--", bin, "demo-server", "--effects", filepath.Join(dir, "effects"))
	fmt.Fprintln(in, call(100))
	if !sc.Scan() {
		t.Fatal("no answer to the first call")
	}
	in.Close()
	if err := first.Wait(); err != nil {
		t.Fatalf("the first wrap: %v", err)
	}
	if between != nil {
		between(ledger)
	}
	// A call in the middle of which its wrap is killed.
	second, in, _ := startWrapSession(t, dir, "--ledger", ledger, "--", bin, "demo-server", "--latency", "1m", "--effects", filepath.Join(dir, "effects"))
	fmt.Fprintln(in, call(200))
	claim := waitClaimLong(t, ledger)
	if err := second.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = second.Wait()
	if fi, err := os.Stat(ledger + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the killed wrap left no log to read (%v): the case tests nothing", err)
	}
	return fullDisk{disk: disk, ledger: ledger, claim: claim, filler: diskfull.Fill(t, disk)}
}

// filesIn lists the files in dir with the SHA-256 of each one's bytes.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %x", e.Name(), sha256.Sum256(b)))
	}
	return out
}

// TestLedgerViewsOnAFullDiskWithAHolder: with a wrap running on the ledger when the disk
// fills, the ledger is not at rest: the views must not read it so (the wrap may write it
// meanwhile) and open it as usual, beside the index the wrap keeps. Before the read at rest
// was fixed to leave alone what it had not opened, this panicked (a nil image closed).
func TestLedgerViewsOnAFullDiskWithAHolder(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	disk := diskfull.Mount(t, 4<<20)
	dir := t.TempDir()
	ledger := filepath.Join(disk, "ledger.db")
	_, in, sc := startWrapSession(t, dir, "--ledger", ledger, "--", bin, "demo-server", "--effects", filepath.Join(dir, "effects"))
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":100}}}`)
	if !sc.Scan() {
		t.Fatal("no answer to the call")
	}
	diskfull.Fill(t, disk)
	r := runBinary(t, []string{store.EnvLedger + "=", "NO_COLOR=1"}, "", "ledger", "ls", "--ledger", ledger)
	if r.code != 0 || strings.Contains(r.stderr, "read-only") || strings.Contains(r.stderr, "panic") || !strings.Contains(r.stdout, "charge_card") {
		t.Errorf("ledger ls on a full disk with a wrap holding the ledger: exit %d; want 0, read as usual\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestLedgerViewsOnANearlyFullDisk: a disk with a few pages left is as full to SQLite as one
// with none, since its open makes a 32 KiB index and a log beside the ledger. A SQLite ledger a
// real wrap wrote and closed, on a small file system of its own, then filled but for 16 KiB:
// the views must read it at rest, say so and why, show its call, and change nothing. Before,
// the probe of the disk wrote its byte, the views opened the ledger for writing as usual, and
// each exited 1 with "no room left": the receipts could not be read until room was made.
func TestLedgerViewsOnANearlyFullDisk(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	disk := diskfull.Mount(t, 4<<20)
	dir := t.TempDir()
	ledger := filepath.Join(disk, "ledger.db")
	w, in, sc := startWrapSession(t, dir, "--ledger", ledger, "--", bin, "demo-server", "--effects", filepath.Join(dir, "effects"))
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":100}}}`)
	if !sc.Scan() {
		t.Fatal("no answer to the call")
	}
	in.Close()
	if err := w.Wait(); err != nil {
		t.Fatalf("the wrap: %v", err)
	}
	filler := diskfull.Fill(t, disk)
	fi, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, fi.Size()-16<<10); err != nil {
		t.Fatal(err)
	}

	before := filesIn(t, disk)
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}
	r := runBinary(t, env, "", "ledger", "ls", "--json", "--ledger", ledger)
	var ls struct{ Records []fence.Record }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ls) != nil || len(ls.Records) != 1 || ls.Records[0].State != fence.StateDone {
		t.Fatalf("ledger ls on a disk with 16 KiB left: exit %d; want 0 and the call done\n%s%s", r.code, r.stdout, r.stderr)
	}
	intent := ls.Records[0].Intent
	for _, args := range [][]string{{"ls"}, {"show", intent}, {"stats"}, {"export"}, {"verify"}} {
		r := runBinary(t, env, "", append(append([]string{"ledger"}, args...), "--ledger", ledger)...)
		if r.code != 0 {
			t.Errorf("ledger %s on a disk with 16 KiB left: exit %d; want 0\n%s%s", args[0], r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "read-only") || !strings.Contains(r.stderr, "no room left") {
			t.Errorf("ledger %s on a disk with 16 KiB left does not say it read the ledger read-only, and why:\n%s", args[0], r.stderr)
		}
	}
	if after := filesIn(t, disk); !slices.Equal(before, after) {
		t.Errorf("the views changed what is on the disk:\nbefore %q\nafter  %q", before, after)
	}
}
