package fence

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
)

// escapedArgs is how json.Marshal wrote canonical args {"q":"a<b&c"} into a record.
const escapedArgs = `{"q":"a\u003cb\u0026c"}`

func TestEncodeRecordKeepsRawJSON(t *testing.T) {
	rec := &Record{Intent: "i", State: StateDone, Args: json.RawMessage("{\"q\":\"a<b&c\u2028\"}"),
		Cert: &Cert{Intent: "i", Args: json.RawMessage(`{"q":"<>"}`), Result: json.RawMessage(`{"r": "&"}`), ResultSHA256: "x"}}
	b, err := EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if string(back.Args) != string(rec.Args) || string(back.Cert.Args) != string(rec.Cert.Args) || string(back.Cert.Result) != string(rec.Cert.Result) {
		t.Fatalf("round trip changed raw JSON: %s", b)
	}
	if b[len(b)-1] != '}' {
		t.Fatalf("encoding ends with %q", b[len(b)-1])
	}
}

// A cert an earlier build committed from a claim whose store had re-escaped its args was
// hashed over those escaped args: it still verifies, and any change to it still fails.
func TestVerifyCertHashedOverEscapedArgs(t *testing.T) {
	res := json.RawMessage(`"ok"`)
	c := Cert{Intent: "i", Tool: "t", Args: json.RawMessage(escapedArgs), Result: res, ResultSHA256: canon.Sum(res),
		Clock: VectorClock{"a": 1}, ReadSet: []ReadSetEntry{}, Agent: "a"}
	body, err := c.appendCanonicalBody(nil, c.Args, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Hash = canon.Sum(body)
	if err := c.Verify(); err != nil {
		t.Fatalf("legacy cert: %v", err)
	}
	for name, change := range map[string]func(*Cert){
		"args":   func(c *Cert) { c.Args = json.RawMessage(`{"q":"a\u003cb\u0026d"}`) },
		"agent":  func(c *Cert) { c.Agent = "b" },
		"result": func(c *Cert) { c.Result = json.RawMessage(`"no"`) },
		"hash":   func(c *Cert) { c.Hash = "" },
	} {
		bad := c
		change(&bad)
		if bad.Verify() == nil {
			t.Errorf("legacy cert with changed %s verifies", name)
		}
	}
	// Canonical args never take the fallback: their hash must be the canonical one.
	plain := c
	plain.Args = json.RawMessage(`{"q":"a<b&c"}`)
	if plain.Verify() == nil {
		t.Fatal("a cert with canonical args verifies against a hash over other bytes")
	}
	// Nor do args no store wrote, hashed as they are: docs/CERTS.md accepts that hash only for
	// canonical args with those five characters escaped, as the recipe's verifier can check.
	for _, args := range []string{
		`{"z":"a\u003cb","a":1}`,   // members out of order
		`{"q": "a\u003cb"}`,        // white space
		`{"n":1e2,"q":"a\u003cb"}`, // a number respelled
		`{"q":"\u0041\u003cb"}`,    // an escape no store wrote
		`{"q":"a\u003Cb"}`,         // upper-case hex
	} {
		odd := c
		odd.Args = json.RawMessage(args)
		body, err := odd.appendCanonicalBody(nil, odd.Args, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		odd.Hash = canon.Sum(body)
		if odd.Verify() == nil {
			t.Errorf("a cert hashed over args %s as they are verifies", args)
		}
	}
}

// A claim recorded with escaped args (by an earlier build's store) commits to a cert over the
// canonical args, the same cert a claim recorded now gets.
func TestCommitCanonicalisesEscapedClaim(t *testing.T) {
	ctx := context.Background()
	st := NewMemoryStore()
	eng := New(st, Config{})
	now := time.Now()
	claim := &Record{Intent: "i", State: StateInFlight, Fingerprint: "f", Token: 7, Nonce: "n", Owner: eng.Config().Owner,
		Tool: "t", Args: json.RawMessage(escapedArgs), Clock: VectorClock{"a": 1}, Agent: "a",
		ClaimedAt: now, LeaseUntil: now.Add(time.Minute), UpdatedAt: now}
	if err := st.Update(ctx, func(tx Tx) error { return tx.Put(claim) }); err != nil {
		t.Fatal(err)
	}
	c, err := eng.Commit(ctx, Ticket{Intent: "i", Token: 7, Nonce: "n"}, []byte(`"ok"`))
	if err != nil {
		t.Fatal(err)
	}
	if h, err := c.ComputeHash(); err != nil || h != c.Hash || string(c.Args) != `{"q":"a<b&c"}` {
		t.Fatalf("cert args %s hash %s, canonical hash %s (%v)", c.Args, c.Hash, h, err)
	}
	rec, err := eng.Status(ctx, "i")
	if err != nil || string(rec.Args) != `{"q":"a<b&c"}` {
		t.Fatalf("done record args %s (%v)", rec.Args, err)
	}
}

// A spool file an earlier build wrote (json.Marshal of the Outcome, no result_bytes) is still
// recorded, from its readable result.
func TestDrainEarlierSpoolFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	eng := New(NewMemoryStore(), Config{SpoolDir: dir})
	adm, err := eng.Prepare(ctx, Request{Intent: "old", Tool: "t", Args: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	o := Outcome{Kind: OutcomeCommit, Ticket: *adm.Ticket, Result: json.RawMessage(`{"paid":true}`), At: time.Now()}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, spoolName(o)), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := eng.DrainSpool(ctx); n != 1 || err != nil {
		t.Fatalf("drain = %d, %v", n, err)
	}
	rec, err := eng.Status(ctx, "old")
	if err != nil || rec.State != StateDone || string(rec.Cert.Result) != `{"paid":true}` {
		t.Fatalf("status = %+v, %v", rec, err)
	}
}
