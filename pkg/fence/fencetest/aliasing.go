package fencetest

import (
	"bytes"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// testCallerSlicesNotKept: a caller reusing its request's slices after Prepare (a read-set
// buffer refilled for the next decision, an args buffer reused) and changing the record
// Status returned ("a copy the caller may keep") changes nothing in the ledger: the claim is
// committed on the read set it was admitted with, and later answers are as recorded.
func testCallerSlicesNotKept(t *testing.T, newStore Factory) {
	t.Parallel()
	eng := fence.New(newStore(t), fence.Config{})
	rs := []fence.ReadSetEntry{{Domain: "alias:read", Seq: 0}}
	args := []byte(`{"n":1}`)
	exact := []byte(`{"n": 1}`)
	r := fence.Request{Intent: "alias:1", Tool: "t", Args: args, ExactArgs: exact, Domain: "alias:target", ReadSet: rs}
	tk := mustFresh(t, eng, r)
	// The caller refills its buffers for its next decision.
	rs[0] = fence.ReadSetEntry{Domain: "alias:other", Seq: 7}
	copy(args, `{"n":2}`)
	copy(exact, `{"n": 2}`)
	c, err := eng.Commit(ctx, tk, []byte(`"ok"`))
	if err != nil {
		t.Fatalf("commit after the caller reused its read-set buffer: %v", err)
	}
	if len(c.ReadSet) != 1 || c.ReadSet[0] != (fence.ReadSetEntry{Domain: "alias:read", Seq: 0}) || c.Verify() != nil {
		t.Fatalf("cert read set %+v (verify %v): want the one admitted", c.ReadSet, c.Verify())
	}
	before, err := eng.Status(ctx, r.Intent)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before.ExactArgs, []byte(`{"n": 1}`)) || string(before.Args) != `{"n":1}` {
		t.Fatalf("record keeps the caller's later bytes: args %s, exact %s", before.Args, before.ExactArgs)
	}
	// The caller changes the record it was given, in place.
	s, _ := eng.Status(ctx, r.Intent)
	s.Cert.Hash = "tampered"
	s.Cert.Result[0] = 'X'
	s.Cert.ReadSet[0].Seq = 99
	s.Args[0] = '['
	s.ReadSet[0].Seq = 99
	if len(s.ExactArgs) > 0 {
		s.ExactArgs[0] = '['
	}
	s.Clock["t"] = 99
	after, err := eng.Status(ctx, r.Intent)
	if err != nil {
		t.Fatal(err)
	}
	if after.Cert.Hash != c.Hash || string(after.Cert.Result) != `"ok"` || after.Cert.ReadSet[0].Seq != 0 ||
		string(after.Args) != string(before.Args) || after.ReadSet[0].Seq != 0 || string(after.ExactArgs) != string(before.ExactArgs) ||
		after.Clock["t"] == 99 {
		t.Fatalf("changing the record Status returned changed the ledger: %+v", after)
	}
	again, err := eng.Prepare(ctx, fence.Request{Intent: "alias:1", Tool: "t", Args: []byte(`{"n":1}`), Domain: "alias:target",
		ReadSet: []fence.ReadSetEntry{{Domain: "alias:read", Seq: 0}}})
	if err != nil || again.Fresh() || again.Cert.Hash != c.Hash || again.Cert.Verify() != nil {
		t.Fatalf("replay after the caller changed its copies: %+v, %v", again, err)
	}

	// Redaction paths: the record names the paths the claim was made with.
	paths := []string{"card"}
	tk2 := mustFresh(t, eng, fence.Request{Intent: "alias:2", Tool: "t", Args: []byte(`{"card":"4242","n":1}`), Redact: paths})
	paths[0] = "n"
	mustCommit(t, eng, tk2, `1`)
	if s, err := eng.Status(ctx, "alias:2"); err != nil || len(s.Redacted) != 1 || s.Redacted[0] != "card" {
		t.Fatalf("redacted paths %v, %v; want [card]", s.Redacted, err)
	}
}
