package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/doctest"
	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// exactCases are arguments and results that encoders like to change: HTML characters, the
// JavaScript line separators, bidi and C1 characters, escapes of NUL, numbers beyond double
// precision and range, -0, 1.0, a lone surrogate, a duplicate member, white space.
var exactCases = []struct{ args, result string }{
	{`{"note":"<b>&amp;</b>` + "\u2028\u2029\u202e\u0085" + `\u0000\u001f\"\\","amount":12345678901234567890123}`,
		`{"content":[{"type":"text","text":"<ok> & ` + "\u2028\u202e\u0085" + ` \u0000"}] , "isError" : false}`},
	{`{"huge":1e400,"neg":-0,"one":1.0,"tiny":-25e-9,"exact":9007199254740993}`,
		`{"n":1e400,"neg":-0,"one":1.0,"big":12345678901234567890123,"k":1,"k":2,"cut":"\ud83d"}`},
	{`{"s":"\u003c\u0026\u2028 spelled as escapes"}`, "[\n  \"\\u003c\",\t1.10\n]"},
}

// Every exported cert verifies (with the engine's Verify and with the documented Python
// verifier), and the export carries each result and the exact arguments byte for byte, on a
// real SQLite file and on the real PostgreSQL.
func TestLedgerExportKeepsBytesAndCerts(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	py, _ := exec.LookPath("python3")
	script := doctest.CertsVerifier(t, "../../docs/CERTS.md")
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if kind == "postgres" {
				loc = pgLedger(t)
			}
			ctx := context.Background()
			l, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]*fence.Cert{}
			for i, c := range exactCases {
				intent := fmt.Sprint("exact-", i)
				adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Args: json.RawMessage(c.args), ExactArgs: []byte(c.args), Agent: "a"})
				if err != nil {
					t.Fatalf("%s: %v", c.args, err)
				}
				cert, err := l.Commit(ctx, *adm.Ticket, []byte(c.result))
				if err != nil {
					t.Fatal(err)
				}
				want[intent] = cert
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			if code, out, errOut := runCLI(t, "", "ledger", "verify", "--ledger", loc); code != exitOK {
				t.Fatalf("verify = %d\n%s%s", code, out, errOut)
			}
			code, out, errOut := runCLI(t, "", "ledger", "export", "--ledger", loc)
			if code != exitOK {
				t.Fatalf("export = %d %s", code, errOut)
			}
			seen := 0
			for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
				var el ledger.ExportLine
				if err := json.Unmarshal([]byte(line), &el); err != nil {
					t.Fatalf("export line %q: %v", line, err)
				}
				if el.Record == nil {
					continue
				}
				r := el.Record
				i := strings.TrimPrefix(r.Intent, "exact-")
				w := want[r.Intent]
				if w == nil || r.Cert == nil {
					t.Fatalf("unexpected record %+v", r)
				}
				seen++
				c := exactCases[i[0]-'0']
				if string(r.Cert.Result) != c.result {
					t.Errorf("%s: exported result\n%q\nwant\n%q", r.Intent, r.Cert.Result, c.result)
				}
				if string(r.ExactArgs) != c.args {
					t.Errorf("%s: exported exact args\n%q\nwant\n%q", r.Intent, r.ExactArgs, c.args)
				}
				wantArgs, err := canon.JSON([]byte(c.args))
				if err != nil {
					t.Fatal(err)
				}
				gotArgs, err := canon.JSON(r.Args)
				if err != nil || !bytes.Equal(gotArgs, wantArgs) {
					t.Errorf("%s: exported args %s canonicalise to %s (%v), want %s", r.Intent, r.Args, gotArgs, err, wantArgs)
				}
				if r.Cert.Hash != w.Hash {
					t.Errorf("%s: exported cert hash %s, committed %s", r.Intent, r.Cert.Hash, w.Hash)
				}
				if err := r.Cert.Verify(); err != nil {
					t.Errorf("%s: exported cert: %v", r.Intent, err)
				}
				if py == "" {
					continue
				}
				var raw struct {
					Record struct {
						Cert json.RawMessage `json:"cert"`
					} `json:"record"`
				}
				if err := json.Unmarshal([]byte(line), &raw); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(py, "-c", script)
				cmd.Stdin = bytes.NewReader(raw.Record.Cert)
				got, err := cmd.CombinedOutput()
				if err != nil || strings.TrimSpace(string(got)) != "ok" {
					t.Errorf("%s: documented verifier on the exported cert: %v %s\n%s", r.Intent, err, got, raw.Record.Cert)
				}
			}
			if seen != len(exactCases) {
				t.Fatalf("export held %d of %d records", seen, len(exactCases))
			}
		})
	}
}
