package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestExportCutShortIsToldFromAWholeOne: `ledger export` ends with an end line that counts its
// records and events, and `ledger verify --export FILE` reads an export and tells a whole one
// (exit 0) from one cut short (exit 1, saying so): the real export file truncated at every
// line's end and at three points inside every line, and the export piped into `head -n 3`,
// whose early exit is a killed reader's. Before, an export had no end line: a copy cut at a
// line's end was whole lines, and read like a smaller ledger; only the export's exit code
// told, and a reader that stops early after the export wrote everything into the pipe leaves
// it 0. The records hold hostile strings (U+2028, NUL, invalid UTF-8 in a result, a result of
// 2 MB) and each cert verifies through export and verify --export.
func TestExportCutShortIsToldFromAWholeOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	seedCLI(t, path)
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	for intent, c := range map[string]struct{ args, result string }{
		"pay:\u2028\u2029<&>":  {`{"memo":"line\u2028sep\u0000nul","amount":1}`, `{"ok":"\u2028"}`},
		"pay:\\x00 not a NUL":  {`{"n":1}`, "{\"raw\":\"\xff\xfe not UTF-8\"}"},
		"pay:huge":             {`{"n":2}`, `{"text":"` + strings.Repeat("x", 2<<20) + `"}`},
		"pay:\u202eright\x1b[": {`{"n":3}`, `[1,2,3]`},
	} {
		adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "pay\u2028", Args: []byte(c.args), Agent: "a\tb"})
		if err != nil {
			t.Fatalf("prepare %q: %v", intent, err)
		}
		if _, err := l.Commit(ctx, *adm.Ticket, []byte(c.result)); err != nil {
			t.Fatalf("commit %q: %v", intent, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	env := []string{"NO_COLOR=1", store.EnvLedger + "="}
	r := runBinary(t, env, "", "ledger", "export", "--ledger", path)
	if r.code != exitOK {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	whole := []byte(r.stdout)
	lines := bytes.SplitAfter(whole, []byte("\n"))
	lines = lines[:len(lines)-1] // after the last line end: nothing
	var end ledger.ExportLine
	if err := json.Unmarshal(lines[len(lines)-1], &end); err != nil || end.End == nil || end.End.Records != 8 || end.End.Events != len(lines)-1-8 {
		t.Fatalf("the export's last line is not its end line counting 8 records and the events (%v): %s", err, lines[len(lines)-1])
	}

	verify := func(b []byte) result {
		t.Helper()
		f := filepath.Join(dir, "export.jsonl")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return runBinary(t, env, "", "ledger", "verify", "--export", f)
	}
	if r := verify(whole); r.code != exitOK || !strings.Contains(r.stdout, fmt.Sprintf("8 record(s), %d event(s), 7 cert(s), 7 verified; 2 with a parent, 1 linked, 1 unresolved", end.End.Events)) {
		t.Fatalf("verify --export of the whole export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// From stdin too, and as JSON.
	rj := runBinary(t, env, string(whole), "ledger", "verify", "--export", "-", "--json")
	var rep ledger.VerifyReport
	if err := json.Unmarshal([]byte(rj.stdout), &rep); err != nil || rj.code != exitOK || !rep.OK() || rep.Verified != 7 || rep.Events != end.End.Events {
		t.Fatalf("verify --export - --json: exit %d (%v)\n%s%s", rj.code, err, rj.stdout, rj.stderr)
	}

	// Cut at every line's end (the end line's included: an export of a build before the end
	// line reads so) and inside every line: at its first byte, its middle and before its end.
	at := 0
	for i, line := range lines {
		for _, n := range []int{0, 1, len(line) / 2, len(line) - 1} {
			if n == 0 && i == 0 {
				continue // an empty file: nothing was exported at all (below)
			}
			r := verify(whole[:at+n])
			want := "was cut short"
			if r.code != exitError || !strings.Contains(r.stdout, want) {
				t.Fatalf("verify --export of the export cut at byte %d (line %d, +%d): exit %d, want 1 and %q\n%.3000s%s", at+n, i+1, n, r.code, want, r.stdout, r.stderr)
			}
		}
		at += len(line)
	}
	if r := verify(nil); r.code != exitError || !strings.Contains(r.stdout, "no end line") {
		t.Fatalf("verify --export of an empty file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A line after the end line, and an end line that counts another number of records.
	if r := verify(append(bytes.Clone(whole), lines[0]...)); r.code != exitError || !strings.Contains(r.stdout, "follows the end line") {
		t.Fatalf("verify --export with a line after the end: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := verify(bytes.Join(slicesWithout(lines, 1), nil)); r.code != exitError || !strings.Contains(r.stdout, "the end line counts 8 record(s)") {
		t.Fatalf("verify --export with a record line taken out: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A reader that stops early: head reads three lines and exits.
	cut := filepath.Join(dir, "head.jsonl")
	sh := exec.Command("sh", "-c", `"$0" ledger export --ledger "$1" | head -n 3 > "$2"`, binaryFor(t, []string{"ledger"}), path, cut)
	sh.Env = append(os.Environ(), env...)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("export | head: %v\n%s", err, out)
	}
	if r := runBinary(t, env, "", "ledger", "verify", "--export", cut); r.code != exitError || !strings.Contains(r.stdout, "no end line") {
		t.Fatalf("verify --export of the export read by head -n 3: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// slicesWithout returns the lines but the one at i.
func slicesWithout(lines [][]byte, i int) [][]byte {
	out := append([][]byte{}, lines[:i]...)
	return append(out, lines[i+1:]...)
}

// TestExportLinesChangedAreTold: the end line holds the SHA-256 of the lines before it, and
// `ledger verify --export` fails an export whose lines were changed after it was written: a
// byte of an audit event (events have no cert of their own: before 2026-12-07 such a change
// verified OK), two events swapped, a record's claim time, which no cert covers. An export whose end
// line has no sha256 (effectfence's before 2026-12-07) still verifies.
func TestExportLinesChangedAreTold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	seedCLI(t, path)
	env := []string{"NO_COLOR=1", store.EnvLedger + "="}
	for _, intent := range []string{"refund:9", "orphan:child"} { // two events an operator wrote
		if r := runBinary(t, env, "", "ledger", "clear", "--ledger", path, "--force", "--reason", "checked the gateway's log", intent); r.code != exitOK {
			t.Fatalf("clear %s: exit %d\n%s", intent, r.code, r.stderr)
		}
	}
	r := runBinary(t, env, "", "ledger", "export", "--ledger", path)
	if r.code != exitOK {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	lines := bytes.SplitAfter([]byte(r.stdout), []byte("\n"))
	lines = lines[:len(lines)-1]
	var events []int
	record := -1
	for i, l := range lines {
		var el ledger.ExportLine
		if err := json.Unmarshal(l, &el); err != nil {
			t.Fatal(err)
		}
		switch {
		case el.Event != nil:
			events = append(events, i)
		case el.Record != nil && el.Record.Intent == "scale:web":
			record = i
		case el.End != nil && len(el.End.SHA256) != 64:
			t.Fatalf("the end line has no sha256 of the lines before it: %s", l)
		}
	}
	if len(events) < 2 || record < 0 {
		t.Fatalf("the export holds %d event(s) and record line %d: too little to change", len(events), record)
	}
	verify := func(what string, ls [][]byte, wantOK bool) {
		t.Helper()
		f := filepath.Join(dir, "export.jsonl")
		if err := os.WriteFile(f, bytes.Join(ls, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		r := runBinary(t, env, "", "ledger", "verify", "--export", f)
		switch {
		case wantOK && r.code != exitOK:
			t.Fatalf("verify --export of %s: exit %d, want 0\n%s%s", what, r.code, r.stdout, r.stderr)
		case !wantOK && (r.code != exitError || !strings.Contains(r.stdout, "were changed after it was written")):
			t.Fatalf("verify --export of %s: exit %d, want 1 saying its lines were changed\n%s%s", what, r.code, r.stdout, r.stderr)
		}
	}
	verify("the export as written", lines, true)
	changed := func(i int, old, new string) [][]byte {
		t.Helper()
		out := append([][]byte{}, lines...)
		if !bytes.Contains(out[i], []byte(old)) {
			t.Fatalf("line %d holds no %q: %s", i+1, old, out[i])
		}
		out[i] = bytes.Replace(out[i], []byte(old), []byte(new), 1)
		return out
	}
	verify("an event's operator changed", changed(events[len(events)-1], `@`, `#`), false)
	swapped := append([][]byte{}, lines...)
	swapped[events[0]], swapped[events[1]] = swapped[events[1]], swapped[events[0]]
	verify("two events swapped", swapped, false)
	verify("a record's claim time changed", changed(record, `"claimed_at":"2`, `"claimed_at":"1`), false)
	var end ledger.ExportLine
	if err := json.Unmarshal(lines[len(lines)-1], &end); err != nil {
		t.Fatal(err)
	}
	verify("an end line without sha256 (an older export)", changed(len(lines)-1, `,"sha256":"`+end.End.SHA256+`"`, ``), true)
}
