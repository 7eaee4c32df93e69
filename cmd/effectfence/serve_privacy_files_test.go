package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/pgrows"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServeKeepsRedactedAndHashOnlyValuesOffEveryFile: docs/privacy.md through the real serve
// process on a real SQLite file and a real PostgreSQL: an agent prepares a charge with the card
// number and every item's cvv redacted (`card.number`, `items.*.cvv`) and keep_result hash,
// commits a result holding an API key, is answered already_done (result_not_kept) for a
// duplicate and intent_conflict for another card. Then none of the secrets is in the ledger's
// files (database, WAL, shared memory) or, for PostgreSQL, any row of its schema; nor in the
// state directory (the spool), serve's stderr, `ledger export` or `ledger show`, which says
// what was withheld. (Not parallel: XDG_STATE_HOME is set for the serve processes.)
func TestServeKeepsRedactedAndHashOnlyValuesOffEveryFile(t *testing.T) {
	const card, cvv1, cvv2, apiKey = "4111222233334444", "918273", "564738", "sk_live_SERVEpriv0123"
	secrets := []string{card, cvv1, cvv2, apiKey}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			state := t.TempDir()
			t.Setenv("XDG_STATE_HOME", state)
			ledger := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				ledger = pgLedger(t)
			}
			args := `{"amount":700,"card":{"number":"` + card + `","exp":"12/29"},"items":[{"sku":"a","cvv":"` + cvv1 + `"},{"sku":"b","cvv":` + cvv2 + `}]}`
			prep := `{"intent":"pay:o-9","tool":"charge","args":` + args + `,"redact":["card.number","items.*.cvv"],"keep_result":"hash","agent":"billing"}`
			a := startServe(t, "--ledger", ledger)
			p := a.prepare(prep)
			if p.Status != serve.StatusFresh {
				t.Fatalf("prepare: %+v", p)
			}
			raw, isErr := a.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_1","api_key":"`+apiKey+`"}}`)
			if isErr {
				t.Fatalf("commit: %s", raw)
			}
			for _, s := range secrets {
				if bytes.Contains(raw, []byte(s)) {
					t.Errorf("the commit's cert holds %q: %s", s, raw)
				}
			}
			if dup := a.prepare(prep); dup.Status != serve.StatusAlreadyDone || !dup.ResultNotKept || dup.DoneAt == nil {
				t.Fatalf("duplicate: %+v", dup)
			}
			other := strings.Replace(prep, card, "5500000000000004", 1)
			if r := a.refused(serve.ToolPrepare, other); r.Code != "intent_conflict" {
				t.Fatalf("another card: %+v", r)
			}
			_ = a.in.Close()
			_ = a.cmd.Wait()

			env := []string{"NO_COLOR=1", "XDG_STATE_HOME=" + state}
			export := runBinary(t, env, "", "ledger", "export", "--ledger", ledger)
			show := runBinary(t, env, "", "ledger", "show", "pay:o-9", "--json", "--ledger", ledger)
			if export.code != exitOK || show.code != exitOK || !strings.Contains(export.stdout, "pay:o-9") {
				t.Fatalf("ledger export: exit %d %s %s; show: exit %d %s %s", export.code, export.stdout, export.stderr, show.code, show.stdout, show.stderr)
			}
			for _, want := range []string{`"card.number"`, `"items.*.cvv"`, `"keep_result": "hash"`, `"[redacted]"`, `"exp"`} {
				if !strings.Contains(show.stdout, want) && !strings.Contains(strings.ReplaceAll(show.stdout, `": "`, `":"`), strings.ReplaceAll(want, `": "`, `":"`)) {
					t.Errorf("ledger show does not say what was withheld (%s):\n%s", want, show.stdout)
				}
			}
			var stored []byte
			if kind == "postgres" {
				stored = pgrows.Rows(t, os.Getenv("EFFECTFENCE_TEST_POSTGRES"), ledger)
			} else {
				files, _ := filepath.Glob(ledger + "*")
				for _, f := range files {
					b, err := os.ReadFile(f)
					if err != nil {
						t.Fatal(err)
					}
					stored = append(stored, b...)
				}
			}
			if !bytes.Contains(stored, []byte("pay:o-9")) {
				t.Fatalf("the %s ledger does not hold the intent: the test looks at nothing", kind)
			}
			_ = filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					b, _ := os.ReadFile(p)
					stored = append(stored, b...)
				}
				return nil
			})
			for _, s := range secrets {
				for what, text := range map[string]string{"the ledger or the state directory": string(stored), "serve's stderr": a.stderr.String(),
					"ledger export": export.stdout + export.stderr, "ledger show": show.stdout + show.stderr} {
					if strings.Contains(text, s) {
						t.Errorf("%s holds %q", what, s)
					}
				}
			}
		})
	}
}
