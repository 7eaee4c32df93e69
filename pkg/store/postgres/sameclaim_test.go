package postgres

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A claim doubt recognises its claim after another process rewrote the record (marked it
// unknown once its lease lapsed) by its nonce; another claim of the intent is not it. Before,
// only the claim's exact body counted as landed: the rewritten record read as "never
// recorded", and the counters the claim carried were added a second time.
func TestClaimDoubtKnowsItsClaimRewritten(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	claim := &fence.Record{Intent: "charge:1", State: fence.StateInFlight, Fingerprint: "ab", Token: fence.PendingToken,
		Nonce: "00112233445566778899aabbccddeeff", Owner: "host/1", Tool: "charge", Args: []byte(`{}`),
		ClaimedAt: now, LeaseUntil: now.Add(time.Second), UpdatedAt: now}
	body, err := fence.EncodeRecord(claim)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(body, tokenMark)
	if i < 0 {
		t.Fatalf("no token in %s", body)
	}
	cut := [2][]byte{body[:i+len(`,"token":`)], body[i+len(tokenMark):]}
	encode := func(r fence.Record) []byte {
		b, err := fence.EncodeRecord(&r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	landed := *claim
	landed.Token = 41
	unknown := landed
	unknown.State, unknown.Reason, unknown.UpdatedAt = fence.StateUnknown, "lease lapsed", now.Add(5*time.Second)
	other := unknown
	other.Nonce, other.Token, other.State = "ffeeddccbbaa99887766554433221100", 42, fence.StateInFlight
	if tok, ok := cutToken(encode(landed), cut); !ok || tok != 41 {
		t.Fatalf("the claim as written: %d %v", tok, ok)
	}
	if _, ok := cutToken(encode(unknown), cut); ok {
		t.Fatal("cutToken took the rewritten record for the claim's exact body")
	}
	if !sameClaim(encode(unknown), cut) {
		t.Error("the claim marked unknown by another process was not recognised as the claim")
	}
	if sameClaim(encode(other), cut) || sameClaim(nil, cut) || sameClaim([]byte(strconv.Quote("x")), cut) {
		t.Error("another claim, no record or a broken body was taken for the claim")
	}
}
