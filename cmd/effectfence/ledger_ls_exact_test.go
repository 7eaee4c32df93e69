package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/olekukonko/tablewriter"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// lsAsBefore is what `ledger ls` wrote when it held every record (ledger.List), then gave
// them to tablewriter or to one json.Encoder: the reference the streaming ls must equal.
func lsAsBefore(t *testing.T, loc string, states []fence.State, jsonOut, wideFlag bool) string {
	t.Helper()
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: loc, Existing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs, err := ledger.List(ctx, l.Store(), states)
	var u *ledger.UnreadableRecords
	if err != nil && !errors.As(err, &u) {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c := ledgerCall{io: streams{out: &out}, wide: true, wideFlag: wideFlag} // a pipe, NO_COLOR
	if jsonOut {
		if recs == nil {
			recs = []fence.Record{}
		}
		doc := map[string]any{"ledger": l.Location, "records": recs}
		if u != nil {
			doc["unreadable"] = unreadableJSON(&unreadableList{recs: u.Records})
		}
		if err := c.writeJSON(doc); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	fmt.Fprintf(&out, "ledger %s: %d intent(s)\n", esc(l.Location), len(recs))
	if len(recs) == 0 {
		return out.String()
	}
	tb := tablewriter.NewTable(&out)
	tb.Header(lsHeader)
	for i := range recs {
		if err := tb.Append(c.lsRow(time.Now(), &recs[i])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Render(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// damageRecord overwrites the stored body of intent, as an edit by hand would.
func damageRecord(t *testing.T, loc, intent, body string) {
	t.Helper()
	if !strings.Contains(loc, "://") {
		db, err := sql.Open("sqlite", loc)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec("UPDATE records SET body = CAST(? AS BLOB) WHERE intent = ?", body, intent); err != nil {
			t.Fatal(err)
		}
		return
	}
	ctx := context.Background()
	conn, table := pgDirect(t, loc, "effectfence_records")
	if _, err := conn.Exec(ctx, "UPDATE "+table+" SET body = convert_to($1, 'UTF8') WHERE intent = $2", body, intent); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerLsWritesWhatItWroteBefore: the streaming `ledger ls` of the real binary writes,
// byte for byte, the table and the JSON document that ls wrote when it held every record, over
// real ledgers (a SQLite file, a PostgreSQL schema) holding hostile text (terminal escapes,
// bidi overrides, C1 controls, HTML characters, the spaces a table trims, a long id), done,
// failed and in-flight records, a domain, and an unreadable record: every --state, --wide,
// an empty listing; and with the same exit code and the unreadable record named once on
// stderr (the table reads the records twice).
func TestLedgerLsWritesWhatItWroteBefore(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				loc = pgLedger(t)
			}
			seedCLI(t, loc)
			seedHostile(t, loc)
			ctx := context.Background()
			l, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			for i, reason := range []string{"\u00a0<b>&amp;</b> padded\u3000", "日本語の理由 😀 e\u0301"} {
				adm, err := l.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("html:%d <&>", i), Tool: "t<>", Args: []byte(`{"q":"<script>&"}`), Agent: "\u00a0a&b"})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Abort(ctx, *adm.Ticket, reason); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Prepare(ctx, fence.Request{Intent: "held:1", Tool: "t", Args: []byte(`{}`), Agent: "a"}); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			damageRecord(t, loc, "notify:web", `{"intent":"someone-else","state":"done"}`)

			env := []string{"NO_COLOR=1", store.EnvLedger + "="}
			for _, c := range []struct {
				args   []string
				states []fence.State
				bad    bool // the unreadable record is among those listed
			}{
				{nil, nil, true},
				{[]string{"--wide"}, nil, true},
				{[]string{"--state", "fenced"}, []fence.State{fence.StateFailed, fence.StateUnknown}, false},
				{[]string{"--state", "done"}, []fence.State{fence.StateDone}, true},
				{[]string{"--state", "in_flight"}, []fence.State{fence.StateInFlight}, false},
				{[]string{"--state", "unknown"}, []fence.State{fence.StateUnknown}, false}, // none
			} {
				for _, jsonOut := range []bool{false, true} {
					args := append([]string{"ledger", "ls", "--ledger", loc}, c.args...)
					if jsonOut {
						args = append(args, "--json")
					}
					r := runBinary(t, env, "", args...)
					want := lsAsBefore(t, loc, c.states, jsonOut, slices.Contains(c.args, "--wide"))
					if r.stdout != want {
						t.Errorf("%q wrote:\n%s\nls wrote before:\n%s", args[2:], r.stdout, want)
					}
					code, named := exitOK, ""
					if c.bad {
						code, named = exitError, `unreadable record, left out: `
					}
					if r.code != code || (c.bad && strings.Count(r.stderr, named) != 1) || (!c.bad && r.stderr != "") {
						t.Errorf("%q: exit %d (want %d), stderr:\n%s", args[2:], r.code, code, r.stderr)
					}
				}
			}
		})
	}
}
