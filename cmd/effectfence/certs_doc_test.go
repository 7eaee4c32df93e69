package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/doctest"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestDocumentedVerifierOnExportedCerts runs the Python verifier printed in docs/CERTS.md on
// certs the real binary records: `effectfence serve` on a SQLite file, calls with hostile
// arguments and results, and the certs read back with `effectfence ledger export`. Each
// verifies; a tampered one does not.
func TestDocumentedVerifierOnExportedCerts(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipping: python3 is not installed")
	}
	// Python's int() of a long text takes quadratic time (hours for an exponent of 10 MB, which
	// a tool's result may hold): the verifier must not compute such an exponent, and here it
	// cannot (Python's own limit of 4,300 digits is kept).
	script := "import sys\nif hasattr(sys, 'set_int_max_str_digits'):\n    sys.set_int_max_str_digits(4300)\n    sys.set_int_max_str_digits = lambda n: None\n" +
		doctest.CertsVerifier(t, "../../docs/CERTS.md")
	deep := strings.Repeat(`[{"k":`, (fence.MaxNesting-2)/2) + `-0` + strings.Repeat(`}]`, (fence.MaxNesting-2)/2)
	calls := []struct{ args, result, more string }{
		{`{"amount":9007199254740993,"rate":0.10000000000000000555,"neg":-0,"huge":1e400,"n":[1.0,1e21,123456789012345678901234,4.9e3,-25e-9]}`, `{"ok":true,"big":-1E400}`, ""},
		{`{"name":"\u00e9e\u0301\ud83d\ude00\n<>&\u2028\u2029\u0001\u007f\/","z":{"\ue000":1,"\ud83d\ude00":2,"a":{}}}`, `{"content":[{"type":"text","text":"cut \ud83d"}], "structuredContent":{"k":1,"k":2}}`, ""},
		{`{"d":` + deep + `}`, `[` + deep + `]`, ""},
		// What privacy.md's settings put in a cert: "[redacted]" args, a result kept as its digest.
		{`{"card":{"number":"4242424242424242","cvc":"123"},"amount":5}`, `{"key":"sk_live_x"}`, `,"redact":["card.number","card.cvc"],"keep_result":"hash"`},
		// A result's numbers are the tool's, any exponent: beyond what Python's Decimal reads
		// (10^18), zero with one too (the verifier raised decimal.InvalidOperation on these).
		{`{"x":0e99999999999999999999}`, `{"zero":0e99999999999999999999,"neg":-0E+123456789012345678901234567890,"big":1e9999999999999999999,"tiny":-12.5e-99999999999999999999}`, ""},
		{`{"x":1}`, `{"long":-25e-` + strings.Repeat("9", 100000) + `}`, ""},
	}

	path := filepath.Join(t.TempDir(), "ledger.db")
	s := startServe(t, "--ledger", path)
	for i, c := range calls {
		p := s.prepare(fmt.Sprintf(`{"intent":"doc-%d","tool":"t","agent":"a","domain":"d","args":%s%s}`, i, c.args, c.more))
		if p.Status != serve.StatusFresh {
			t.Fatalf("prepare %d: %+v", i, p)
		}
		if raw, isErr := s.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":`+c.result+`}`); isErr {
			t.Fatalf("commit %d: %.500s", i, raw)
		}
	}

	r := runBinary(t, []string{store.EnvLedger + "=" + path}, "", "ledger", "export")
	if r.code != exitOK {
		t.Fatalf("ledger export: exit %d\n%s", r.code, r.stderr)
	}
	verify := func(cert []byte) string {
		cmd := exec.Command(py, "-c", script)
		cmd.Stdin = bytes.NewReader(cert)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%.2000s", err, out)
		}
		return strings.TrimSpace(string(out))
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
		if got := verify(l.Record.Cert); got != "ok" {
			t.Fatalf("the documented verifier on an exported cert: %s\n%.300s", got, l.Record.Cert)
		}
		tampered := bytes.Replace(l.Record.Cert, []byte(`"agent":"a"`), []byte(`"agent":"b"`), 1)
		if got := verify(tampered); got != "MISMATCH" {
			t.Fatalf("the documented verifier on a tampered cert: %s", got)
		}
	}
	if certs != len(calls) {
		t.Fatalf("export holds %d certs, want %d:\n%.1000s", certs, len(calls), r.stdout)
	}
	// effectfence's own verifier agrees, redacted records included.
	if r := runBinary(t, []string{store.EnvLedger + "=" + path, "NO_COLOR=1"}, "", "ledger", "verify"); r.code != exitOK {
		t.Fatalf("ledger verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
