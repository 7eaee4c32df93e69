package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestClaimCacheBounds holds DECISIONS-postgres.md's bounds on the remembered claims: at most
// 4096 entries and 16 MiB (an entry with its record counts twice its body), bodies over
// 256 KiB not at all, and a claim too big to keep forgets the intent's earlier one.
func TestClaimCacheBounds(t *testing.T) {
	var c claimCache
	for i := range 5000 {
		c.put(fmt.Sprint("i", i), claim{body: []byte("{}")})
	}
	if len(c.m) != claimCacheEntries || c.n.Load() != claimCacheEntries {
		t.Fatalf("%d entries (%d counted), want %d", len(c.m), c.n.Load(), claimCacheEntries)
	}

	c = claimCache{}
	body := make([]byte, 200<<10)
	for i := range 200 {
		c.put(fmt.Sprint("b", i), claim{body: body, rec: &fence.Record{}})
	}
	if c.bytes > claimCacheBytes || c.bytes != 2*len(body)*len(c.m) {
		t.Fatalf("%d bytes in %d entries, bound %d", c.bytes, len(c.m), claimCacheBytes)
	}
	if len(c.m) != claimCacheBytes/(2*len(body)) {
		t.Fatalf("%d entries of %d bytes each, want as many as fit in %d", len(c.m), 2*len(body), claimCacheBytes)
	}

	c = claimCache{}
	c.put("x", claim{body: []byte("small")})
	c.put("x", claim{body: make([]byte, claimMaxBytes+1)})
	if _, ok := c.get("x"); ok || c.bytes != 0 || c.n.Load() != 0 {
		t.Fatalf("a body over %d bytes is remembered, or the intent's smaller claim stayed (bytes %d)", claimMaxBytes, c.bytes)
	}
	c.put("y", claim{body: make([]byte, claimMaxBytes)})
	if _, ok := c.get("y"); !ok {
		t.Fatalf("a body of exactly %d bytes is not remembered", claimMaxBytes)
	}
}

// TestBigClaimCommitsInATransaction: a claim too big for the cache (arguments over 256 KiB)
// commits through the transaction path, and a duplicate gets the recorded result.
func TestBigClaimCommitsInATransaction(t *testing.T) {
	s := newTestStore(t)
	e := fence.New(s, fence.Config{})
	ctx := context.Background()
	r := fence.Request{Intent: "big", Tool: "t", Args: []byte(`{"blob":"` + strings.Repeat("x", claimMaxBytes) + `"}`)}
	adm, err := e.Prepare(ctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	if _, ok := s.claims.get(r.Intent); ok {
		t.Fatal("a claim over 256 KiB is remembered")
	}
	cert, err := e.Commit(ctx, *adm.Ticket, []byte(`"done"`))
	if err != nil {
		t.Fatal(err)
	}
	dup, err := e.Prepare(ctx, r)
	if err != nil || dup.Fresh() || dup.Cert.Hash != cert.Hash {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
}
