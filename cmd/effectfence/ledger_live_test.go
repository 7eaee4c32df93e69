package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerLiveWriterProcess is not a test: it is the body of the writer processes
// TestLedgerViewsWhileWrapsWrite starts. It does nothing unless EFFECTFENCE_TEST_WRITER is
// set. It records one intent after another (claim, commit) on the ledger EFFECTFENCE_LEDGER
// names, and holds one claim of its own (live-held-PID) in flight, until it is killed. It
// prints "writing" once its held claim and its first commit are in the ledger.
func TestLedgerLiveWriterProcess(t *testing.T) {
	if os.Getenv("EFFECTFENCE_TEST_WRITER") == "" {
		return
	}
	if err := liveWriter(); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func liveWriter() error {
	ctx := context.Background()
	o, err := store.FromEnv("server")
	if err != nil {
		return err
	}
	o.LeaseTTL = time.Hour // the held claim's lease runs for the whole test
	l, err := store.Open(ctx, o)
	if err != nil {
		return err
	}
	pid := os.Getpid()
	if _, err := l.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("live-held-%d", pid), Tool: "charge_card", Args: []byte(`{"amount":1}`), Agent: "writer"}); err != nil {
		return err
	}
	for i := 0; ; i++ {
		adm, err := l.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("live-%d-%06d", pid, i), Tool: "charge_card", Args: []byte(fmt.Sprintf(`{"amount":%d}`, i)), Agent: "writer"})
		if err != nil {
			return err
		}
		if _, err := l.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
			return err
		}
		if i == 0 {
			fmt.Println("writing")
		}
		// A writer paced as a busy agent is, not flat out: the views still meet writes in
		// every transaction they take, without the writers' thousands of records a second on
		// PostgreSQL (three race-built writers took half of CI's two cores for 40 s, and
		// every view read a ledger that many times larger).
		time.Sleep(5 * time.Millisecond)
	}
}

// startWriter starts a writer process on the ledger at loc and waits until it writes.
func startWriter(t *testing.T, loc string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerLiveWriterProcess$")
	cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_WRITER=1", store.EnvLedger+"="+loc)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "writing" {
		t.Fatalf("writer printed %q", sc.Text())
	}
	return cmd
}

// checkExport parses an export: every line one whole record or event, records first and in
// strictly increasing intent order (no record twice, none torn), every event after them, and
// last the end line, which counts them.
func checkExport(t *testing.T, out string) (records, events int) {
	t.Helper()
	if out == "" || !strings.HasSuffix(out, "\n") {
		t.Fatalf("export does not end in a newline: %q", out[max(0, len(out)-200):])
	}
	last := ""
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for i, s := range lines {
		var line ledger.ExportLine
		if err := json.Unmarshal([]byte(s), &line); err != nil {
			t.Fatalf("export line %d does not parse (%v): %q", i+1, err, s)
		}
		if i == len(lines)-1 {
			if e := line.End; e == nil || e.Records != records || e.Events != events || e.UnreadableRecords+e.UnreadableEvents != 0 {
				t.Fatalf("the export's last line is not its end line counting %d records and %d events: %s", records, events, s)
			}
			break
		}
		switch {
		case line.Record != nil && line.Event == nil:
			if events > 0 {
				t.Fatalf("export line %d: a record after the events: %s", i+1, s)
			}
			if records > 0 && line.Record.Intent <= last {
				t.Fatalf("export line %d: record %q after %q (twice, or out of order)", i+1, line.Record.Intent, last)
			}
			last = line.Record.Intent
			records++
		case line.Event != nil && line.Record == nil:
			events++
		default:
			t.Fatalf("export line %d is neither one record nor one event: %s", i+1, s)
		}
	}
	return records, events
}

// TestLedgerViewsWhileWrapsWrite runs the operator's commands on a SQLite file and on a
// PostgreSQL ledger that live writer processes (each its own process, as every MCP client's
// wrap is) keep writing: ls, export, stats, verify and sweep answer from a consistent view
// and exit 0 (and check, on SQLite, finds the file healthy), clear of a live holder's claim
// is refused without --force and changes nothing, clear of a done intent goes through, and
// once a writer is killed with SIGKILL its held claim is cleared (docs/ledger.md).
func TestLedgerViewsWhileWrapsWrite(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				loc = pgLedger(t)
			}
			viewsWhileWritersWrite(t, loc)
		})
	}
}

func viewsWhileWritersWrite(t *testing.T, path string) {
	env := []string{"NO_COLOR=1", store.EnvLedger + "=" + path}
	var writers []*exec.Cmd
	for range 3 {
		writers = append(writers, startWriter(t, path))
	}
	prevRecords := 0
	for round := range 2 {
		r := runBinary(t, env, "", "ledger", "export")
		if r.code != exitOK || r.stderr != "" {
			t.Fatalf("round %d: export while writers write: exit %d\n%s", round, r.code, r.stderr)
		}
		records, _ := checkExport(t, r.stdout)
		if records < 6 || records < prevRecords {
			t.Fatalf("round %d: export of %d records (before: %d)", round, records, prevRecords)
		}
		prevRecords = records

		r = runBinary(t, env, "", "ledger", "ls", "--json")
		var ls struct {
			Records []fence.Record `json:"records"`
		}
		if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &ls) != nil || len(ls.Records) < records {
			t.Fatalf("round %d: ls --json = %d (%d records, export had %d)\n%s%s", round, r.code, len(ls.Records), records, r.stdout[:min(len(r.stdout), 500)], r.stderr)
		}
		views := [][]string{{"ledger", "stats"}, {"ledger", "verify"}, {"ledger", "sweep"}, {"ledger", "ls", "--state", "in_flight"}}
		if !strings.Contains(path, "://") {
			views = append(views, []string{"ledger", "check"}) // read-only, beside live writers and their log
		}
		for _, args := range views {
			if r := runBinary(t, env, "", args...); r.code != exitOK {
				t.Fatalf("round %d: %v while writers write: exit %d\n%s%s", round, args[1:], r.code, r.stdout, r.stderr)
			}
		}
	}

	// A live holder's claim: refused, nothing changed; a done intent of a running writer:
	// refused without --force (its effect ran: a clear would have the next attempt run it
	// again), cleared with it.
	held := fmt.Sprintf("live-held-%d", writers[0].Process.Pid)
	r := runBinary(t, env, "", "ledger", "clear", held, "--reason", "checked")
	if r.code != exitError || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("clear of a live writer's claim = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBinary(t, env, "", "ledger", "show", held, "--json"); r.code != exitOK || !strings.Contains(r.stdout, `"state": "in_flight"`) {
		t.Fatalf("the refused clear changed the claim: %d\n%s", r.code, r.stdout)
	}
	done := fmt.Sprintf("live-%d-%06d", writers[1].Process.Pid, 0)
	if r := runBinary(t, env, "", "ledger", "clear", done, "--reason", "checked", "--json"); r.code != exitError || !strings.Contains(r.stderr, "--force") || !strings.Contains(r.stderr, "run the effect again") {
		t.Fatalf("clear of a done intent without --force = %d; want refused\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBinary(t, env, "", "ledger", "clear", done, "--reason", "checked", "--force", "--json"); r.code != exitOK || !strings.Contains(r.stdout, `"previous_state": "done"`) {
		t.Fatalf("clear --force of a done intent while its writer writes = %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Killed with SIGKILL, the writer's held claim is its holder gone, its lease (an hour)
	// running: refused without --force (a process it started could still run the effect),
	// cleared with it.
	if err := writers[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := writers[0].Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer did not die of SIGKILL: %v", err)
	}
	if r := runBinary(t, env, "", "ledger", "clear", held, "--reason", "the holder is gone", "--json"); r.code != exitError || !strings.Contains(r.stderr, "lease of claim") {
		t.Fatalf("clear of a killed writer's claim, its lease running = %d; want refused naming the lease\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBinary(t, env, "", "ledger", "clear", held, "--reason", "the holder is gone", "--force", "--json"); r.code != exitOK {
		t.Fatalf("clear --force of a killed writer's claim = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, env, "", "ledger", "export")
	if r.code != exitOK {
		t.Fatalf("export after the kill: %d\n%s", r.code, r.stderr)
	}
	checkExport(t, r.stdout)
}
