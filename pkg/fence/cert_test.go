package fence_test

import (
	"context"
	"encoding/json"
	"testing"

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
	c, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1","status":"succeeded"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash != vectorHash {
		t.Fatalf("engine cert hash %s, want %s", c.Hash, vectorHash)
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
	})
}

func orNullBytes(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}
