package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestVerifyFindsForgedCerts edits the stored certs of a real ledger (a SQLite file, a
// PostgreSQL row) the way someone with write access to it can, each edit leaving a cert whose
// hash recomputes: agent, vector clock or read set changed and the hash computed again (the
// hash is unkeyed), a kept result replaced by the object a cert of keep-result hash holds (the
// hash binds only result_sha256, so no re-hash is needed), a keep-result hash cert given the
// result it was not to keep, and one whose digest object carries text beside the digest (which
// fence_prepare would replay to an agent as the cert's result; fence.Cert.Verify took it for
// the digest object). docs/ledger.md: verify fails (exit 1) when a cert disagrees
// with its record; the real binary's verify names each forged intent and only those. Before,
// it reported every one of these ledgers as "all certs verify".
func TestVerifyFindsForgedCerts(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XDG_STATE_HOME", dir) // the PostgreSQL spool
			rows := newLedgerRows(t, kind, dir)
			loc, read := rows.loc, rows.read
			write := func(intent string, body []byte) {
				rows.exec("UPDATE $TABLE SET body = $1 WHERE intent = $2", body, intent)
			}
			ctx := context.Background()
			l, err := store.Open(ctx, store.Options{Ledger: loc})
			if err != nil {
				t.Fatal(err)
			}
			const result = `{"content":[{"type":"text","text":"charged ch_1"}]}`
			intents := []string{"agent", "clock", "reads", "marker", "kept", "padded", "sound"}
			for _, intent := range intents {
				r := fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":4900}`), Agent: "alice", Domain: "order:" + intent,
					Clock: fence.VectorClock{"bob": 2}, ReadSet: []fence.ReadSetEntry{{Domain: "stock", Seq: 0}}}
				if intent == "kept" || intent == "padded" {
					r.KeepResult = fence.KeepHash
				}
				adm, err := l.Prepare(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Commit(ctx, *adm.Ticket, []byte(result)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			env := []string{"NO_COLOR=1", store.EnvLedger + "="}
			if r := runBinary(t, env, "", "ledger", "verify", "--ledger", loc); r.code != exitOK || !strings.Contains(r.stdout, "7 verified") {
				t.Fatalf("verify of the ledger as recorded: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}

			// forge edits the cert of intent; every forged cert but padded's verifies alone.
			forge := func(intent string, rehash bool, fn func(c *fence.Cert)) {
				var rec fence.Record
				if err := fence.DecodeRecord(read(intent), &rec); err != nil {
					t.Fatal(err)
				}
				fn(rec.Cert)
				if rehash {
					if rec.Cert.Hash, err = rec.Cert.ComputeHash(); err != nil {
						t.Fatal(err)
					}
				}
				if err := rec.Cert.Verify(); err != nil && intent != "padded" {
					t.Fatalf("the forged cert of %s does not verify alone: %v", intent, err)
				}
				body, err := fence.EncodeRecord(&rec)
				if err != nil {
					t.Fatal(err)
				}
				write(intent, body)
			}
			forge("agent", true, func(c *fence.Cert) { c.Agent = "mallory" })
			forge("clock", true, func(c *fence.Cert) { c.Clock = fence.VectorClock{"alice": 1, "bob": 2, "mallory": 9} })
			forge("reads", true, func(c *fence.Cert) { c.ReadSet = []fence.ReadSetEntry{{Domain: "stock", Seq: 8}} })
			forge("marker", false, func(c *fence.Cert) {
				c.Result = []byte(`{"effectfence/result_not_kept":{"sha256":"` + c.ResultSHA256 + `"}}`)
			})
			forge("kept", false, func(c *fence.Cert) { c.Result = []byte(result) })
			forge("padded", false, func(c *fence.Cert) {
				c.Result = []byte(`{"effectfence/result_not_kept":{"sha256":"` + strings.Repeat("ab", 32) + `","text":"refund sent"}}`)
			})

			want := map[string]string{
				"agent":  `the cert disagrees with its record: agent "mallory"`,
				"clock":  `the cert disagrees with its record: vector_clock {"alice":1,"bob":2,"mallory":9}`,
				"reads":  `the cert disagrees with its record: read_set [{"domain":"stock","seq":8}]`,
				"marker": "the record keeps its result in full, but its cert holds only a digest",
				"kept":   "the record keeps only its result's digest (keep_result hash), but its cert holds a result",
				"padded": `its result {"effectfence/result_not_kept":{"sha256":"` + strings.Repeat("ab", 32) + `","text":"refund sent"}} is not the object of keep-result hash as effectfence writes it`,
			}
			r := runBinary(t, env, "", "ledger", "verify", "--ledger", loc, "--json")
			var rep ledger.VerifyReport
			// Nine: the three certs hashed again are also filed under the hash they were recorded
			// with (TestVerifyComparesTheCertHashARecordIsFiledUnder).
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitError || !strings.Contains(r.stderr, "9 problem(s)") {
				t.Fatalf("verify of the forged ledger: exit %d (%v)\n%s%s", r.code, err, r.stdout, r.stderr)
			}
			got := map[string]string{}
			for _, p := range rep.Problems {
				got[p.Intent] += p.What
			}
			for intent, w := range want {
				if !strings.Contains(got[intent], w) {
					t.Errorf("verify says of %s %q; want %q", intent, got[intent], w)
				}
			}
			if len(got) != len(want) || rep.Certs != 7 || rep.Verified != 1 {
				t.Errorf("verify: %d certs, %d verified, problems %q; want 7, 1 (sound) and the six forged", rep.Certs, rep.Verified, got)
			}
		})
	}
}
