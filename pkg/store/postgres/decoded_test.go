package postgres

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestSpeculativeCommitUsesTheDecodedClaim: a claim this store wrote is remembered with the
// record that decoding its bytes gives, and the one-statement commit answers its Get with that
// record instead of decoding; a remembered claim without it (a record EncodeRecordDecoded
// cannot tell) is decoded, and either way the commit is one statement.
func TestSpeculativeCommitUsesTheDecodedClaim(t *testing.T) {
	s := newTestStore(t)
	st := &stages{}
	s.hook = st.hook
	e := fence.New(s, fence.Config{})
	ctx := context.Background()
	for i, intent := range []string{"decoded:kept", "decoded:dropped"} {
		adm, err := e.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{"amount":7,"note":"<&>"}`), Domain: "acct"})
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		c, ok := s.claims.get(intent)
		if !ok || c.rec == nil {
			t.Fatalf("%s: the claim was not remembered with its record (%v)", intent, ok)
		}
		want := &fence.Record{}
		if err := json.Unmarshal(c.body, want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c.rec, want) {
			t.Fatalf("%s: the remembered record\n%+v\nis not what its bytes decode to\n%+v", intent, c.rec, want)
		}
		if i == 1 {
			c.rec = nil
			s.claims.put(intent, c)
		}
		if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
			t.Fatal(err)
		}
		if st.count("speculated") != i+1 || st.count("speculation missed") != 0 {
			t.Fatalf("%s: stages %v", intent, st.n)
		}
		rec, err := e.Status(ctx, intent)
		if err != nil || rec.State != fence.StateDone || rec.Token != adm.Ticket.Token {
			t.Fatalf("%s: recorded %+v %v", intent, rec, err)
		}
	}
}

// TestClaimCacheCountsDecodedRecords: an entry with its decoded record counts twice its body
// against the cache's byte bound.
func TestClaimCacheCountsDecodedRecords(t *testing.T) {
	var c claimCache
	body := make([]byte, 1000)
	c.put("a", claim{body: body})
	c.put("b", claim{body: body, rec: &fence.Record{}})
	if c.bytes != 3000 {
		t.Fatalf("bytes %d, want 3000", c.bytes)
	}
	c.put("b", claim{body: body})
	c.forget("a")
	if c.bytes != 1000 {
		t.Fatalf("bytes %d, want 1000", c.bytes)
	}
}
