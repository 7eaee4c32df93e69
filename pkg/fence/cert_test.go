package fence_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/doctest"
	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

// The documented test vector (docs/CERTS.md). The expected hash was computed outside Go:
// python3 json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False) is RFC
// 8785 for this ASCII, integer-only body, then sha256.
const (
	vectorCanonical = `{"agent":"billing","args":{"amount":4900,"currency":"usd"},"domain":"order:123","intent":"charge:order-123","parent":"","read_set":[{"domain":"order:123","seq":0}],"result":{"charge":"ch_1","status":"succeeded"},"seq":1,"tool":"charge_card","vector_clock":{"billing":1}}`
	vectorHash      = "699f044bf17717a970c3827440f31d1973939864625354d76073e80bfd70b04d"
)

func vectorCert() fence.Cert {
	return fence.Cert{
		Intent: "charge:order-123", Domain: "order:123", Seq: 1, Tool: "charge_card",
		Args:    json.RawMessage(`{"currency":"usd","amount":4900}`),
		Result:  json.RawMessage(`{"status":"succeeded","charge":"ch_1"}`),
		Clock:   fence.VectorClock{"billing": 1, "idle": 0},
		ReadSet: []fence.ReadSetEntry{{Domain: "order:123", Seq: 0}},
		Agent:   "billing",
	}
}

func TestCertHashVector(t *testing.T) {
	if canon.Sum([]byte(vectorCanonical)) != vectorHash {
		t.Fatal("vector constants disagree")
	}
	c := vectorCert()
	h, err := c.ComputeHash()
	if err != nil {
		t.Fatal(err)
	}
	if h != vectorHash {
		t.Fatalf("hash = %s, want %s", h, vectorHash)
	}
	c.Hash = h
	if err := c.Verify(); err != nil {
		t.Fatal(err)
	}
	// The cert's own JSON, minus hash, canonicalises to the vector: what a verifier in another
	// language does.
	raw, _ := json.Marshal(c)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	delete(m, "hash")
	got, err := canon.Marshal(m)
	if err != nil || string(got) != vectorCanonical {
		t.Fatalf("external recipe gives %s", got)
	}
	for _, tamper := range []func(*fence.Cert){
		func(c *fence.Cert) { c.Seq = 2 },
		func(c *fence.Cert) { c.Result = json.RawMessage(`{"charge":"ch_2","status":"succeeded"}`) },
		func(c *fence.Cert) { c.Clock = fence.VectorClock{"billing": 2} },
		func(c *fence.Cert) { c.Parent = "x" },
		func(c *fence.Cert) { c.ReadSet = nil },
	} {
		d := c
		tamper(&d)
		if d.Verify() == nil {
			t.Errorf("tampered cert %+v verifies", d)
		}
	}
}

// The engine produces the vector when given the vector's call.
func TestEngineCertMatchesVector(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	adm, err := eng.Prepare(ctx, fence.Request{
		Intent: "charge:order-123", Domain: "order:123", Tool: "charge_card",
		Args: json.RawMessage(`{"amount":4900,"currency":"usd"}`), Agent: "billing",
		ReadSet: []fence.ReadSetEntry{{Domain: "order:123", Seq: 0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := eng.Commit(ctx, *adm.Ticket, []byte(vector2Result))
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash != vector2Hash || c.ResultSHA256 != vector2ResultSHA256 || string(c.Result) != vector2Result {
		t.Fatalf("engine cert %s / %s / %s, want %s / %s", c.Hash, c.ResultSHA256, c.Result, vector2Hash, vector2ResultSHA256)
	}
	if err := c.Verify(); err != nil {
		t.Fatal(err)
	}
	// The JSON form carries the exact bytes through any re-encoding of the readable result.
	raw, _ := json.Marshal(map[string]any{"cert": c})
	var back struct{ Cert fence.Cert }
	if err := json.Unmarshal(raw, &back); err != nil || string(back.Cert.Result) != vector2Result || back.Cert.Verify() != nil {
		t.Fatalf("round trip: %s %v", back.Cert.Result, err)
	}
	tampered := back.Cert
	tampered.Result = json.RawMessage(`{"status":"succeeded","charge":"ch_1"}`) // same value, other bytes
	if tampered.Verify() == nil {
		t.Fatal("a result with other bytes verifies")
	}
}

// The second vector (docs/CERTS.md): a cert with result_sha256. Every value below was
// computed with python3's hashlib and base64, outside Go.
const (
	vector2Result       = `{"status":"succeeded", "charge":"ch_1"}`
	vector2ResultSHA256 = "5b6a39937c218a73ded7f1805a39aa2b69cfb3370a7de583d30d7438c3ae5932"
	vector2Hash         = "a152289920fd6d9dad5e6f7ee534e3695aaf82f5e5bccc0eff969ad5d35cfb17"
)

// The Python verifier printed in docs/CERTS.md accepts what the engine records, including
// numbers beyond double precision and results no canonicaliser accepts, and rejects a
// tampered cert.
func TestDocumentedVerifier(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipping: python3 is not installed")
	}
	script := doctest.CertsVerifier(t, "../../docs/CERTS.md")
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	verifyJSON := func(raw []byte) string {
		cmd := exec.Command(py, "-c", script)
		cmd.Stdin = strings.NewReader(string(raw))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	verify := func(c *fence.Cert) string {
		raw, _ := json.Marshal(c)
		return verifyJSON(raw)
	}
	// withReadable is c's JSON with its readable result, which the hash does not cover,
	// replaced.
	withReadable := func(c *fence.Cert, result string) []byte {
		raw, _ := json.Marshal(c)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		m["result"] = json.RawMessage(result)
		raw, _ = json.Marshal(m)
		return raw
	}
	for i, c := range []struct{ args, result string }{
		{`{"amount":9007199254740993,"rate":0.10000000000000000555,"huge":1e400,"tiny":-25e-9,"n":[1.0,1e21,123456789012345678901234]}`, `{"ok":true}`},
		{`{"name":"\u00e9\ud83d\ude00\n<>","z":{"\ue000":1,"\ud83d\ude00":2}}`, `{"content":[{"type":"text","text":"cut \ud83d"}], "structuredContent":{"k":1,"k":2,"big":1e400}}`},
		// As deep as prepare accepts: beyond what Python's json module parses.
		{`{"d":` + strings.Repeat(`[{"k":`, (fence.MaxNesting-2)/2) + `1e400` + strings.Repeat(`}]`, (fence.MaxNesting-2)/2) + `}`, `{"ok":true}`},
	} {
		adm, err := eng.Prepare(ctx, fence.Request{Intent: fmt.Sprint("doc-", i), Tool: "t", Args: json.RawMessage(c.args), Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := eng.Commit(ctx, *adm.Ticket, []byte(c.result))
		if err != nil {
			t.Fatal(err)
		}
		if got := verify(cert); got != "ok" {
			t.Fatalf("python verifier on %s: %s", c.args, got)
		}
		bad := *cert
		bad.Agent = "mallory"
		if got := verify(&bad); got == "ok" {
			t.Fatal("python verifier accepted a tampered cert")
		}
		// The readable result, edited or replaced by the keep-result hash object, must agree
		// with result_bytes; null (no readable result) says nothing.
		for _, forged := range []string{`{"ok":false}`, `{"effectfence/result_not_kept":{"sha256":"` + strings.Repeat("0", 64) + `"}}`} {
			if got := verifyJSON(withReadable(cert, forged)); got == "ok" {
				t.Fatalf("python verifier accepted a cert whose readable result is %s", forged)
			}
		}
		if got := verifyJSON(withReadable(cert, "null")); got != "ok" {
			t.Fatalf("python verifier on a cert without a readable result: %s", got)
		}
		// The exact result replaced by the keep-result hash object: as that object is written,
		// the cert verifies (what a verified cert proves, in docs/CERTS.md, says so); with
		// anything beside the digest in it, which a replay would show, it does not.
		for object, want := range map[string]string{
			`{"effectfence/result_not_kept":{"sha256":"` + cert.ResultSHA256 + `"}}`:                      "ok",
			`{"effectfence/result_not_kept":{"sha256":"` + cert.ResultSHA256 + `","text":"refund sent"}}`: "MISMATCH",
			`{"effectfence/result_not_kept":"refund sent"}`:                                               "MISMATCH",
			`{"effectfence/result_not_kept":{"sha256":"` + strings.ToUpper(cert.ResultSHA256) + `"}}`:     "MISMATCH",
		} {
			raw := withReadable(cert, "null")
			raw = bytes.Replace(raw, []byte(base64.StdEncoding.EncodeToString(cert.Result)), []byte(base64.StdEncoding.EncodeToString([]byte(object))), 1)
			if got := verifyJSON(raw); got != want {
				t.Fatalf("python verifier on a cert whose result_bytes hold %s: %s, want %s", object, got, want)
			}
		}
	}

	// A cert of 8 MB arguments verifies within 1 GiB of address space (RLIMIT_AS, which Linux
	// enforces): the verifier's pattern for strings took about 170 bytes per character of one
	// and ran out of memory here.
	if runtime.GOOS != "linux" {
		return
	}
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "doc-big", Tool: "t", Args: json.RawMessage(`{"blob":"` + strings.Repeat("x", 8<<20) + `","n":123456789012345678901234567890}`), Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`"`+strings.Repeat("y", 1<<20)+`"`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cert)
	bounded := exec.Command(py, "-c", "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"+script)
	bounded.Stdin = bytes.NewReader(raw)
	if out, err := bounded.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python verifier on a cert of 8 MB arguments within 1 GiB: %v\n%s", err, bytes.TrimSpace(out)[max(0, len(bytes.TrimSpace(out))-300):])
	}
}

// naiveCanonical is what any JCS library makes of the cert's JSON without its hash.
func naiveCanonical(t testing.TB, c fence.Cert) ([]byte, bool) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "hash")
	if c.ResultSHA256 != "" {
		delete(m, "result")
		delete(m, "result_bytes")
	}
	raw, _ = json.Marshal(m)
	out, err := canon.JSON(raw)
	if err != nil {
		return nil, false
	}
	return out, true
}

func FuzzCertCanonical(f *testing.F) {
	f.Add("charge:order-123", "", "order:123", uint64(1), "charge_card", []byte(`{"amount":4900}`), []byte(`{"ok":true}`), "billing", "order:123", uint64(0))
	f.Add("\u00e9\n\"", "p\u2028", "", uint64(0), "t\x01", []byte(`null`), []byte(`[1e3,-0,"\ud83d\ude00"]`), "\U0001F600", "z", uint64(1<<53))
	f.Fuzz(func(t *testing.T, intent, parent, domain string, seq uint64, tool string, args, result []byte, agent, rsDomain string, rsSeq uint64) {
		c := fence.Cert{Intent: intent, Parent: parent, Domain: domain, Seq: seq, Tool: tool, Args: args, Result: result,
			Agent: agent, Clock: fence.VectorClock{agent: 1}, ReadSet: []fence.ReadSetEntry{{Domain: rsDomain, Seq: rsSeq}}}
		if seq > 1<<53 || rsSeq > 1<<53 || !json.Valid(orNullBytes(args)) || !json.Valid(orNullBytes(result)) {
			return
		}
		want, ok := naiveCanonical(t, c)
		if !ok {
			return
		}
		got, err := c.ComputeHash()
		if err != nil {
			t.Fatalf("ComputeHash: %v", err)
		}
		if got != canon.Sum(want) {
			t.Fatalf("hand-assembled canonical form differs from the library's %s", want)
		}
		c.ResultSHA256 = canon.Sum(result)
		if want, ok = naiveCanonical(t, c); !ok {
			t.Fatal("cert with result_sha256 does not encode")
		}
		if got, err = c.ComputeHash(); err != nil || got != canon.Sum(want) {
			t.Fatalf("with result_sha256: %v, body %s", err, want)
		}
	})
}

func orNullBytes(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}
