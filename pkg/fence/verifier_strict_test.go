package fence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/doctest"
	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestDocumentedVerifierReadsStrictJSON: docs/CERTS.md's Python verifier judges a cert
// whose result_bytes are not JSON as fence.Cert does. The engine records only JSON results,
// but anyone can write a cert whose hash verifies (docs/CERTS.md), and fence.Cert writes such
// a cert with a null readable result; set to a value, it is not one fence.Cert decodes (the
// readable result is not result_bytes' value, as result_bytes has none). The verifier read
// text token by token without asking where each may stand, so it read
// `{"status":"failed" "status":"succeeded"}` as the object {"status":"succeeded"}, and a cert
// showing that as its readable result printed ok where fence.Cert refused it. It now refuses
// text that is not one JSON value, in result_bytes and in the cert itself.
func TestDocumentedVerifierReadsStrictJSON(t *testing.T) {
	t.Parallel()
	run := doctest.CertsVerifierRun(t, "../../docs/CERTS.md")
	verify := func(raw []byte) string {
		out, err := run(raw)
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		return out
	}
	var err error
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	for i, c := range []struct{ result, shown string }{
		{`{"status":"failed" "status":"succeeded"}`, `{"status":"succeeded"}`},
		{`[1 2]`, `[1,2]`},
		{`[00]`, `[0,0]`},
		{`{"a":1,}`, `{"a":1}`},
		{`{"refund" "sent"}`, `{"refund":"sent"}`},
		{`[1,,2]`, `[1,2]`},
		{`{"a":1}}`, `{"a":1}`},
	} {
		cert := &fence.Cert{Intent: fmt.Sprint("strict-", i), Tool: "t", Args: json.RawMessage(`{}`), Agent: "a",
			Clock: fence.VectorClock{"a": 1}, ReadSet: []fence.ReadSetEntry{}, Result: []byte(c.result), ResultSHA256: canon.Sum([]byte(c.result))}
		if cert.Hash, err = cert.ComputeHash(); err != nil {
			t.Fatal(err)
		}
		if err := cert.Verify(); err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(cert)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(raw, []byte(`"result":null`)) {
			t.Fatalf("the cert of result %s has a readable result: %s", c.result, raw)
		}
		if got := verify(raw); got != "ok" {
			t.Fatalf("python verifier on the cert of result %s: %s", c.result, got)
		}
		shown := bytes.Replace(raw, []byte(`"result":null`), []byte(`"result":`+c.shown), 1)
		var back fence.Cert
		if json.Unmarshal(shown, &back) == nil {
			t.Fatalf("fence.Cert took the cert of result %s shown as %s", c.result, c.shown)
		}
		if got := verify(shown); got != "MISMATCH" {
			t.Errorf("python verifier on the cert of result %s shown as %s: %s, want MISMATCH (fence.Cert refuses it)", c.result, c.shown, got)
		}
	}
	// Nor is a cert that is not JSON itself read as one.
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "strict-cert", Tool: "t", Args: json.RawMessage(`{"n":1}`), Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cert)
	for _, bad := range [][]byte{
		bytes.Replace(raw, []byte(`"tool":"t",`), []byte(`"tool" "t",`), 1),
		bytes.Replace(raw, []byte(`"args":{"n":1}`), []byte(`"args":{"n":1,}`), 1),
		append(bytes.Clone(raw), '}'),
	} {
		var back fence.Cert
		if json.Unmarshal(bad, &back) == nil {
			t.Fatalf("fence.Cert took %s", bad)
		}
		if got := verify(bad); got != "MISMATCH" {
			t.Errorf("python verifier on %s: %s, want MISMATCH", bad, got)
		}
	}
}

// TestDocumentedVerifierDropsZeroClockEntries: step 3 of docs/CERTS.md drops a vector clock's
// zero entries, as fence.Cert does, and so does its Python verifier: it hashed them, and
// printed MISMATCH for a cert fence.Cert verifies. And it refuses counters (and seq) not
// written as integers, as fence.Cert does.
func TestDocumentedVerifierDropsZeroClockEntries(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipping: python3 is not installed")
	}
	script := doctest.CertsVerifier(t, "../../docs/CERTS.md")
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "zero-clock", Tool: "t", Args: json.RawMessage(`{"n":1}`), Agent: "a", Clock: fence.VectorClock{"b": 3}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cert)
	for edited, want := range map[string]string{
		`"vector_clock":{"a":1,"b":3,"c":0}`: "ok",
		`"vector_clock":{"0":0,"a":1,"b":3}`: "ok",
		`"vector_clock":{"a":1,"b":3,"c":1}`: "MISMATCH",
		// A counter is an unsigned integer written as one: fence.Cert refuses 1.0 and 3e0,
		// which the verifier took as the values they spell.
		`"vector_clock":{"a":1.0,"b":3}`: "MISMATCH",
		`"vector_clock":{"a":1,"b":3e0}`: "MISMATCH",
	} {
		e := bytes.Replace(raw, []byte(`"vector_clock":{"a":1,"b":3}`), []byte(edited), 1)
		if bytes.Equal(e, raw) {
			t.Fatalf("no vector clock to edit in %s", raw)
		}
		var back fence.Cert
		got := "ok"
		if json.Unmarshal(e, &back) != nil || back.Verify() != nil {
			got = "MISMATCH"
		}
		if got != want {
			t.Fatalf("fence.Cert on the cert with %s: %s, want %s", edited, got, want)
		}
		cmd := exec.Command(py, "-c", script)
		cmd.Stdin = bytes.NewReader(e)
		out, err := cmd.Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("python verifier on the cert with %s: %s (%v), want %s as fence.Cert", edited, got, err, want)
		}
	}
}
