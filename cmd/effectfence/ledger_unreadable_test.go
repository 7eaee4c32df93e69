package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
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

// TestUnreadableRecordDoesNotHideTheRest damages two records of a real ledger (a SQLite file
// edited with SQL as with the sqlite3 shell, a PostgreSQL row edited by UPDATE): the done
// record of notify:web, and the claim of charge:order-7 whose holder was killed -9 in flight.
// docs/ledger.md: ls, export and stats of the real binary show every other record, name each
// unreadable one on stderr and exit 1; verify and check fail naming each; a new process
// opens the ledger and runs other intents, while the damaged claim's intent stays fenced (its
// duplicate is refused, the effect is not run again). Before, one such record made ls,
// export, stats and verify fail with nothing shown, the damaged claim made every process
// fail to open the ledger, and check's only way out was to move the whole ledger aside.
func TestUnreadableRecordDoesNotHideTheRest(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_STATE_HOME", dir) // the PostgreSQL spool
			effects := filepath.Join(dir, "effects")
			var loc string
			var damage func(intent, body string)
			switch kind {
			case "sqlite":
				loc = filepath.Join(dir, "ledger.db")
				damage = func(intent, body string) {
					sqliteExec(t, loc, "UPDATE records SET body = CAST(? AS BLOB) WHERE intent = ?", body, intent)
				}
			case "postgres":
				loc = pgLedger(t)
				damage = func(intent, body string) {
					pgExec(t, loc, "effectfence_records", "UPDATE %s SET body = convert_to($1, 'UTF8') WHERE intent = $2", body, intent)
				}
			}
			seedCLI(t, loc)
			h := startHelper(t, "hold", loc, effects)
			if h.line != "admitted" {
				t.Fatalf("holder: %q", h.line)
			}
			h.kill9(t)
			damage("charge:order-7", `{"intent":"charge:order-7","state":`)
			damage("notify:web", `{"intent":"someone-else","state":"done"}`)

			env := []string{"NO_COLOR=1", store.EnvLedger + "="}
			named := func(t *testing.T, what string, r result) {
				t.Helper()
				for _, intent := range []string{"charge:order-7", "notify:web"} {
					if !strings.Contains(r.stderr, `unreadable record, left out: `) || !strings.Contains(r.stderr, `"`+intent+`"`) {
						t.Errorf("%s does not name the unreadable %s on stderr:\n%s", what, intent, r.stderr)
					}
				}
				if r.code != exitError || !strings.Contains(r.stderr, "2 record(s) could not be read") {
					t.Errorf("%s: exit %d; want %d saying 2 records could not be read:\n%s", what, r.code, exitError, r.stderr)
				}
			}
			sound := []string{"orphan:child", "refund:9", "scale:web"}

			r := runBinary(t, env, "", "ledger", "ls", "--ledger", loc)
			named(t, "ls", r)
			for _, intent := range sound {
				if !strings.Contains(r.stdout, intent) {
					t.Errorf("ls does not show %s:\n%s", intent, r.stdout)
				}
			}
			if !strings.Contains(r.stdout, "3 intent(s)") {
				t.Errorf("ls:\n%s", r.stdout)
			}

			r = runBinary(t, env, "", "ledger", "ls", "--ledger", loc, "--json")
			named(t, "ls --json", r)
			var ls struct {
				Records    []fence.Record
				Unreadable []struct{ Intent, Error string }
			}
			if err := json.Unmarshal([]byte(r.stdout), &ls); err != nil || len(ls.Records) != 3 || len(ls.Unreadable) != 2 ||
				ls.Unreadable[0].Intent != "charge:order-7" || ls.Unreadable[1].Intent != "notify:web" {
				t.Errorf("ls --json (%v):\n%s", err, r.stdout)
			}

			r = runBinary(t, env, "", "ledger", "export", "--ledger", loc)
			named(t, "export", r)
			var got []string
			for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
				var l ledger.ExportLine
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatalf("export line %q: %v", line, err)
				}
				if l.Record != nil {
					got = append(got, l.Record.Intent)
				}
			}
			if strings.Join(got, " ") != strings.Join(sound, " ") || !strings.Contains(r.stdout, `"event":`) {
				t.Errorf("export wrote records %q (want %q) and events:\n%s", got, sound, r.stdout)
			}

			r = runBinary(t, env, "", "ledger", "stats", "--ledger", loc, "--json")
			named(t, "stats", r)
			var stats struct{ States map[fence.State]int }
			if err := json.Unmarshal([]byte(r.stdout), &stats); err != nil || stats.States[fence.StateDone] != 2 || stats.States[fence.StateFailed] != 1 {
				t.Errorf("stats --json (%v):\n%s", err, r.stdout)
			}

			r = runBinary(t, env, "", "ledger", "verify", "--ledger", loc, "--json")
			var rep ledger.VerifyReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitError || rep.Verified != 2 || len(rep.Problems) != 2 ||
				rep.Problems[0].Intent != "charge:order-7" || rep.Problems[1].Intent != "notify:web" {
				t.Errorf("verify: exit %d (%v)\n%s%s", r.code, err, r.stdout, r.stderr)
			}
			if kind == "sqlite" {
				r = runBinary(t, env, "", "ledger", "check", "--ledger", loc)
				if r.code != exitError || !strings.Contains(r.stdout, `"charge:order-7" is unreadable`) || !strings.Contains(r.stdout, `"notify:web" names intent "someone-else"`) {
					t.Errorf("check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				// The way out removes the damaged record, not the ledger with every receipt.
				if !strings.Contains(r.stdout, `"DELETE FROM records WHERE intent = '`) || strings.Contains(r.stdout, "mv ") {
					t.Errorf("check's advice for damaged records:\n%s", r.stdout)
				}
			}
			if r := runBinary(t, env, "", "ledger", "show", "notify:web", "--ledger", loc); r.code != exitError || !strings.Contains(r.stderr, "notify:web") {
				t.Errorf("show of the damaged record: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}

			// The fence still works for everything else, and the damaged claim stays fenced.
			dup := exec.Command(os.Args[0], "-test.run=^TestLedgerHelperProcess$")
			dup.Env = append(os.Environ(), "EFFECTFENCE_TEST_HELPER=attempt", "EFFECTFENCE_TEST_EFFECTS="+effects, store.EnvLedger+"="+loc)
			if out, err := dup.CombinedOutput(); strings.Contains(string(out), "committed") || strings.Contains(string(out), "admitted") {
				t.Errorf("a duplicate of the damaged claim ran (%v):\n%s", err, out)
			}
			if n := lines(t, effects); n != 1 {
				t.Fatalf("the effect of the damaged claim ran %d times; want 1", n)
			}
			ctx := context.Background()
			var warned bytes.Buffer
			l, err := store.Open(ctx, store.Options{Ledger: loc, Log: &warned})
			if err != nil {
				t.Fatalf("a ledger with a damaged claim does not open: %v", err)
			}
			defer l.Close()
			if w := warned.String(); !strings.Contains(w, "effectfence: warning: ") || !strings.Contains(w, `"charge:order-7"`) || strings.Count(w, "\n") != 1 {
				t.Errorf("the open does not warn of the damaged claim in one line: %q", w)
			}
			adm, err := l.Prepare(ctx, fence.Request{Intent: "charge:order-8", Tool: "charge_card", Args: []byte(`{"amount":1}`)})
			if err != nil || !adm.Fresh() {
				t.Fatalf("another intent: %v %v", adm, err)
			}
			_, err = l.Prepare(ctx, fence.Request{Intent: "charge:order-7", Tool: "charge_card", Args: []byte(`{"amount":4900}`)})
			var u *fence.UnreadableError
			if !errors.As(err, &u) || u.Intent != "charge:order-7" {
				t.Fatalf("the damaged claim's duplicate = %v; want its record's error", err)
			}
		})
	}
}

// TestUnreadableEventDoesNotHideTheRest damages one audit event of a real ledger (a SQLite
// file edited with SQL as with the sqlite3 shell: a token below zero, which its column takes;
// a PostgreSQL row's body set to '\x00' by UPDATE): the abort event of refund:9, which has
// another event beside it. docs/ledger.md: show of that intent shows its record and every
// other event, and export writes every record and every other event; each names the
// unreadable event on stderr (its intent and its row) and exits 1; verify, which reads no
// event, passes. Before, that one event made show of its intent and the whole export fail
// with nothing shown but the store's error.
func TestUnreadableEventDoesNotHideTheRest(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_STATE_HOME", dir) // the PostgreSQL spool
			var loc string
			var damage func(intent string)
			switch kind {
			case "sqlite":
				loc = filepath.Join(dir, "ledger.db")
				damage = func(intent string) {
					sqliteExec(t, loc, "UPDATE events SET token = -1 WHERE intent = ? AND kind = 'abort'", intent)
				}
			case "postgres":
				loc = pgLedger(t)
				damage = func(intent string) {
					pgExec(t, loc, "effectfence_events", `UPDATE %s SET body = '\x00' WHERE intent = $1 AND kind = 'abort'`, intent)
				}
			}
			seedCLI(t, loc) // refund:9 aborted: its abort event
			ctx := context.Background()
			l, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			// refund:9 is cleared: its events abort, clear.
			if _, err := l.Clear(ctx, "refund:9", "operator", "refunded by hand"); err != nil {
				t.Fatal(err)
			}
			adm, err := l.Prepare(ctx, fence.Request{Intent: "refund:10", Tool: "refund", Args: []byte(`{"amount":6}`)})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Abort(ctx, *adm.Ticket, "gateway timeout again"); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			damage("refund:9")

			env := []string{"NO_COLOR=1", store.EnvLedger + "="}
			named := func(t *testing.T, what string, r result) {
				t.Helper()
				if r.code != exitError || !strings.Contains(r.stderr, "unreadable audit event, left out: ") || !strings.Contains(r.stderr, `"refund:9"`) ||
					!strings.Contains(r.stderr, "DELETE FROM ") || !strings.Contains(r.stderr, "1 audit event(s) could not be read") {
					t.Errorf("%s: exit %d; want %d naming the unreadable event of refund:9:\n%s", what, r.code, exitError, r.stderr)
				}
			}

			r := runBinary(t, env, "", "ledger", "show", "refund:9", "--ledger", loc)
			named(t, "show", r)
			if !strings.Contains(r.stdout, "refunded by hand") {
				t.Errorf("show does not show the other event of refund:9:\n%s", r.stdout)
			}
			r = runBinary(t, env, "", "ledger", "show", "refund:9", "--ledger", loc, "--json")
			named(t, "show --json", r)
			var d struct {
				ledger.Detail
				Unreadable []struct {
					Intent string `json:"intent"`
					Event  int64  `json:"event"`
					Error  string `json:"error"`
				} `json:"unreadable"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || len(d.Events) != 1 || d.Events[0].Kind != fence.EventClear {
				t.Errorf("show --json (%v):\n%s", err, r.stdout)
			}
			// The document names what it left out, as ls --json and stats --json do.
			if len(d.Unreadable) != 1 || d.Unreadable[0].Intent != "refund:9" || d.Unreadable[0].Event <= 0 || !strings.Contains(d.Unreadable[0].Error, "DELETE FROM ") {
				t.Errorf("show --json does not list the unreadable event under \"unreadable\":\n%s", r.stdout)
			}
			if kind == "sqlite" {
				// ledger check names the event and the command that removes it, and does not
				// advise moving the ledger aside.
				r := runBinary(t, env, "", "ledger", "check", "--ledger", loc)
				if r.code == 0 || !strings.Contains(r.stdout+r.stderr, fmt.Sprintf("audit event %d of intent \"refund:9\" is unreadable", d.Unreadable[0].Event)) ||
					!strings.Contains(r.stdout+r.stderr, fmt.Sprintf("DELETE FROM events WHERE id = %d", d.Unreadable[0].Event)) || strings.Contains(r.stdout+r.stderr, "move it aside") {
					t.Errorf("ledger check of a ledger with an unreadable event: exit %d\n%s%s", r.code, r.stdout, r.stderr)
				}
			}

			r = runBinary(t, env, "", "ledger", "export", "--ledger", loc)
			named(t, "export", r)
			var recs, evs []string
			for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
				var l ledger.ExportLine
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatalf("export line %q: %v", line, err)
				}
				if l.Record != nil {
					recs = append(recs, l.Record.Intent)
				}
				if l.Event != nil {
					evs = append(evs, l.Event.Intent+" "+l.Event.Kind)
				}
			}
			if strings.Join(recs, ",") != "notify:web,orphan:child,refund:10,scale:web" ||
				strings.Join(evs, ",") != "refund:9 clear,refund:10 abort" {
				t.Errorf("export wrote records %q and events %q:\n%s", recs, evs, r.stdout)
			}

			if r := runBinary(t, env, "", "ledger", "show", "refund:10", "--ledger", loc); r.code != 0 || !strings.Contains(r.stdout, "gateway timeout again") {
				t.Errorf("show of another intent: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if r := runBinary(t, env, "", "ledger", "verify", "--ledger", loc); r.code != 0 {
				t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// sqliteExec runs stmt with args on the SQLite ledger at path, past the store (a damage).
func sqliteExec(t *testing.T, path, stmt string, args ...any) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt, args...); err != nil {
		t.Fatal(err)
	}
}

// pgExec runs stmt (whose %s is the ledger's table, named in its schema) with args on the
// PostgreSQL ledger at loc, past the store (a damage).
func pgExec(t *testing.T, loc, table, stmt string, args ...any) {
	t.Helper()
	conn, name := pgDirect(t, loc, table)
	if _, err := conn.Exec(context.Background(), fmt.Sprintf(stmt, name), args...); err != nil {
		t.Fatal(err)
	}
}
