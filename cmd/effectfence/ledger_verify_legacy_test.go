package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/doctest"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// escapingBuild is the last commit whose stores re-escaped <, >, &, U+2028 and U+2029 in a
// record's args (\u003c…) before the engine hashed its cert over them (docs/CERTS.md).
const escapingBuild = "20c5e6a0c9e907183a5ef4703ef62887d63cd7fd"

// TestVerifyLegacyEscapedArgs records calls whose arguments hold those characters with that
// build's real `effectfence serve` on a SQLite file, then runs this build's `ledger verify` on
// the file. docs/CERTS.md: verify accepts the hash such a cert carries, and only for such args.
// Before, verify reported the record's fingerprint as not that of its tool and args (it
// fingerprinted the escaped args as they are) and exited 1 on every such ledger. (That the
// hash is accepted only for such args: TestVerifyCertHashedOverEscapedArgs.)
func TestVerifyLegacyEscapedArgs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds an earlier effectfence from git history")
	}
	old := buildPreviousBuild(t, escapingBuild)
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := startRawServe(t, old, path)
	for i, args := range []map[string]any{
		{"q": "a<b&c>d\u2028e\u2029", "n": json.Number("9007199254740993")},
		{"html": "<script>", "z": map[string]any{"&": 1, "<": 2}},
	} {
		intent := []string{"legacy:0", "legacy:1"}[i]
		r := s.call("fence_prepare", map[string]any{"intent": intent, "tool": "t", "agent": "a", "args": args})
		var p struct {
			Status string          `json:"status"`
			Ticket json.RawMessage `json:"ticket"`
		}
		if err := json.Unmarshal(r, &p); err != nil || p.Status != "fresh" {
			t.Fatalf("prepare %s: %s", intent, r)
		}
		if c := s.call("fence_commit", map[string]any{"ticket": p.Ticket, "result": map[string]any{"ok": true}}); !bytes.Contains(c, []byte(`"cert"`)) {
			t.Fatalf("commit %s: %s", intent, c)
		}
	}
	s.stop()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	err = db.QueryRow("SELECT body FROM records WHERE intent = 'legacy:0'").Scan(&body)
	db.Close()
	if err != nil || !bytes.Contains(body, []byte(`\u003cb\u0026c\u003ed\u2028e\u2029`)) {
		t.Fatalf("the earlier build did not store escaped args (%v):\n%s", err, body)
	}

	env := []string{"NO_COLOR=1", store.EnvLedger + "="}
	r := runBinary(t, env, "", "ledger", "verify", "--ledger", path, "--json")
	var rep ledger.VerifyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitOK || !rep.OK() || rep.Verified != 2 {
		t.Fatalf("verify of the earlier build's ledger: exit %d (%v)\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	// docs/CERTS.md's Python verifier agrees on the certs of its export: it printed MISMATCH
	// for both, which verify passed (the page said how to check such a hash, and its
	// verifier did not).
	py, err := exec.LookPath("python3")
	if err != nil {
		return
	}
	script := doctest.CertsVerifier(t, "../../docs/CERTS.md")
	r = runBinary(t, env, "", "ledger", "export", "--ledger", path)
	if r.code != exitOK {
		t.Fatalf("export of the earlier build's ledger: exit %d\n%s", r.code, r.stderr)
	}
	certs := 0
	for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
		var l struct {
			Record *struct {
				Cert json.RawMessage `json:"cert"`
			} `json:"record"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("export line: %v", err)
		}
		if l.Record == nil || len(l.Record.Cert) == 0 {
			continue
		}
		certs++
		for cert, want := range map[string]string{
			string(l.Record.Cert): "ok",
			// The escaped hash binds the args as the canonical one does.
			strings.Replace(string(l.Record.Cert), `\u003c`, `\u003e`, 1): "MISMATCH",
		} {
			cmd := exec.Command(py, "-c", script)
			cmd.Stdin = strings.NewReader(cert)
			out, err := cmd.Output()
			if got := strings.TrimSpace(string(out)); err != nil || got != want {
				t.Errorf("the documented verifier on a cert of the earlier build's export: %s (%v), want %s\n%.600s", got, err, want, cert)
			}
		}
	}
	if certs != 2 {
		t.Fatalf("the export holds %d certs, want 2:\n%.2000s", certs, r.stdout)
	}
}
