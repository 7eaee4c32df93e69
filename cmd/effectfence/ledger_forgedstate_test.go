package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// forgeState rewrites the stored record of intent with state, as a hand edit (or damage) of
// the file would: the body still decodes, so the views show the record.
func forgeState(t *testing.T, path, intent, state string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var body []byte
	if err := db.QueryRow("SELECT body FROM records WHERE intent = ?", intent).Scan(&body); err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatalf("the stored record of %s is not JSON (%v): %q", intent, err, body)
	}
	rec["state"] = state
	if body, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE records SET body = ? WHERE intent = ?", body, intent); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerViewsEscapeAForgedState: a record whose stored state was edited into terminal
// escapes (it decodes, so ls, show and clear show it) is shown escaped like every other text
// read from the ledger (docs/ledger.md), in a pipe and on a terminal, coloured or not. Before,
// the state was printed as stored: it could clear the operator's screen and set its title.
func TestLedgerViewsEscapeAForgedState(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedCLI(t, path)
	const forged = "\x1b]0;pwned\x07\x1b[2J\u009b31m\u202edone"
	forgeState(t, path, "refund:9", forged)

	runs := [][]string{
		{"ledger", "ls", "--ledger", path},
		{"ledger", "show", "refund:9", "--ledger", path},
		{"ledger", "stats", "--ledger", path},
		{"ledger", "verify", "--ledger", path},
		{"ledger", "ls", "--json", "--ledger", path},
		{"ledger", "stats", "--json", "--ledger", path},
	}
	for _, env := range [][]string{{"NO_COLOR=1"}, {"NO_COLOR="}} {
		for _, args := range runs {
			r := runBinary(t, env, "", args...)
			for name, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
				if c, bad := actsOnTerminal(s); bad {
					t.Errorf("%v %q in a pipe: %s holds %U:\n%q", env, args[1:], name, c, s)
				}
			}
		}
		for _, args := range runs[:2] {
			out := strings.ReplaceAll(onTerminal(t, env, args...), "\r\n", "\n") // the terminal's own line ends
			if env[0] == "NO_COLOR=" {
				out = strings.NewReplacer("\x1b[31;1m", "", "\x1b[32m", "", "\x1b[33m", "", "\x1b[0m", "").Replace(out) // the states' own colours
			}
			if c, bad := actsOnTerminal(out); bad {
				t.Errorf("%v %q on a terminal holds %U:\n%q", env, args[1:], c, out)
			}
		}
	}
	r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "show", "refund:9", "--ledger", path)
	if !strings.Contains(r.stdout, `\x1b]0;pwned\x07\x1b[2J\u009b31m\u202edone`) {
		t.Errorf("show does not show the forged state escaped:\n%s", r.stdout)
	}
	// clear's answer names the state it cleared.
	r = runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "clear", "refund:9", "--reason", "checked", "--force", "--ledger", path)
	if c, bad := actsOnTerminal(r.stdout + r.stderr); bad {
		t.Errorf("clear of the forged record: exit %d, output holds %U:\n%q%q", r.code, c, r.stdout, r.stderr)
	}
}

// TestLedgerViewsEscapeHostileTextOnATerminal: what an agent wrote (seedHostile, and NUL in a
// tool, an agent, arguments and a reason) is escaped on a terminal too, where ls and verify
// shorten cells (never inside an escape) and --json and export write JSON (docs/ledger.md).
// TestLedgerViewsEscapeHostileText covers a pipe.
func TestLedgerViewsEscapeHostileTextOnATerminal(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedHostile(t, path)
	// NUL, which a terminal may drop (hiding what follows it from a reader) and C strings end at.
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := l.Prepare(ctx, fence.Request{Intent: "nul:1", Tool: "charge\x00_card", Args: []byte(`{"k":"a\u0000b"}`), Agent: "bot\x00\x1b[8m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Abort(ctx, *adm.Ticket, "stalled\x00\x1b[2J"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ledger", "show", "nul:1", "--ledger", path},
		{"ledger", "show", "nul:1", "--json", "--ledger", path},
		{"ledger", "ls", "--ledger", path},
		{"ledger", "ls", "--wide", "--ledger", path},
		{"ledger", "ls", "--json", "--ledger", path},
		{"ledger", "show", evilIntent, "--ledger", path},
		{"ledger", "show", evilIntent, "--json", "--ledger", path},
		{"ledger", "verify", "--ledger", path},
		{"ledger", "stats", "--ledger", path},
		{"ledger", "export", "--ledger", path},
	} {
		out := strings.ReplaceAll(onTerminal(t, []string{"NO_COLOR=1"}, args...), "\r\n", "\n")
		if c, bad := actsOnTerminal(out); bad {
			t.Errorf("%q on a terminal holds %U:\n%q", args[1:], c, out)
		}
		if args[2] == "nul:1" && !strings.Contains(out, `charge\x00_card`) && !strings.Contains(out, `charge\u0000_card`) {
			t.Errorf("%q on a terminal does not show the tool's NUL:\n%q", args[1:], out)
		}
	}
}

// TestLedgerStatsCountsARecordOfAForgedState: a record whose stored state is one no engine
// writes (edited by hand, or damaged, and still decoding) is counted by `ledger stats` under
// that state, escaped, as ls shows it: the table listed the four states alone and left the
// record out without a word, its rows summing to one intent fewer than the ledger holds, where
// stats --json counted it.
func TestLedgerStatsCountsARecordOfAForgedState(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedCLI(t, path) // 4 records: three done, refund:9 failed
	forgeState(t, path, "refund:9", "\x1b[2Jsettled")

	r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "stats", "--ledger", path)
	if r.code != exitOK {
		t.Fatalf("ledger stats = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	total := 0
	forged := false
	for _, ln := range strings.Split(r.stdout, "\n") {
		cells := strings.Split(ln, "│")
		if len(cells) != 4 {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(cells[2]))
		if err != nil {
			continue // the header
		}
		total += n
		if strings.TrimSpace(cells[1]) == `\x1b[2Jsettled` && n == 1 {
			forged = true
		}
	}
	if total != 4 || !forged {
		t.Errorf("ledger stats counts %d intent(s) of 4, the forged state's row shown: %v:\n%s", total, forged, r.stdout)
	}
	if c, bad := actsOnTerminal(r.stdout); bad {
		t.Errorf("ledger stats shows %U:\n%q", c, r.stdout)
	}
}
