package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestVerifyComparesTheCertHashARecordIsFiledUnder edits the stored record of a real ledger (a
// SQLite file, a PostgreSQL row) as someone with write access to it can: the cert's result
// replaced and its result_sha256 and hash computed again, the row's cert_hash column left as
// the engine filed it. The cert verifies alone and agrees with its record (a record keeps no
// result apart from its cert), so only the column tells. `ledger check` (SQLite) compared it;
// verify did not, and reported "all certs verify" on both stores. A done record filed under
// the state in_flight (a hand edit of the state column) is named too.
func TestVerifyComparesTheCertHashARecordIsFiledUnder(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_STATE_HOME", dir) // the PostgreSQL spool
			rows := newLedgerRows(t, kind, dir)
			loc, read, sqlExec := rows.loc, rows.read, rows.exec
			ctx := context.Background()
			l, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			for _, intent := range []string{"refund", "state", "sound"} {
				adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "refund", Args: []byte(`{"amount":4900}`), Agent: "alice"})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Commit(ctx, *adm.Ticket, []byte(`{"refunded":false}`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			env := []string{"NO_COLOR=1", store.EnvLedger + "="}
			if r := runBinary(t, env, "", "ledger", "verify", "--ledger", loc); r.code != exitOK || !strings.Contains(r.stdout, "3 verified") {
				t.Fatalf("verify of the ledger as recorded: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}

			var rec fence.Record
			if err := fence.DecodeRecord(read("refund"), &rec); err != nil {
				t.Fatal(err)
			}
			filed := rec.Cert.Hash
			rec.Cert.Result = []byte(`{"refunded":true}`)
			rec.Cert.ResultSHA256 = canon.Sum(rec.Cert.Result)
			if rec.Cert.Hash, err = rec.Cert.ComputeHash(); err != nil {
				t.Fatal(err)
			}
			if err := rec.Cert.Verify(); err != nil {
				t.Fatalf("the edited cert does not verify alone: %v", err)
			}
			body, err := fence.EncodeRecord(&rec)
			if err != nil {
				t.Fatal(err)
			}
			sqlExec("UPDATE $TABLE SET body = $1 WHERE intent = $2", body, "refund")
			sqlExec("UPDATE $TABLE SET state = 'in_flight' WHERE intent = $1", "state")

			r := runBinary(t, env, "", "ledger", "verify", "--ledger", loc, "--json")
			var rep ledger.VerifyReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitError || !strings.Contains(r.stderr, "2 problem(s)") {
				t.Fatalf("verify of the edited ledger: exit %d (%v)\n%s%s", r.code, err, r.stdout, r.stderr)
			}
			got := map[string]string{}
			for _, p := range rep.Problems {
				got[p.Intent] += p.What
			}
			for intent, want := range map[string]string{
				"refund": "the record is filed under cert hash " + filed + ", but its cert's hash is " + rec.Cert.Hash,
				"state":  `the record is done but filed as "in_flight"`,
			} {
				if !strings.Contains(got[intent], want) {
					t.Errorf("verify says of %s %q; want %q", intent, got[intent], want)
				}
			}
			if len(got) != 2 {
				t.Errorf("verify: problems %q; want only refund's and state's", got)
			}

			// With stderr on a terminal, where verify counts the records it reads through a
			// store of its own around the ledger's: that store hid the filing, and verify
			// passed there.
			script, err := exec.LookPath("script")
			if err != nil {
				return
			}
			file := filepath.Join(dir, "verify.out")
			cmd := exec.Command(script, "-qec", posixQuote(effectfence(t))+" ledger verify --ledger "+posixQuote(loc)+" > "+posixQuote(file), "/dev/null")
			cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1", store.EnvLedger+"=")
			term, err := cmd.CombinedOutput()
			report, _ := os.ReadFile(file)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitError || !strings.Contains(string(report), "filed under cert hash "+filed) {
				t.Errorf("verify with stderr on a terminal: %v\n%s\nterminal: %q", err, report, term)
			}
		})
	}
}
