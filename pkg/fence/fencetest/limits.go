package fencetest

import (
	"math"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// testLongestDurations: the longest lease and result TTL a Config can hold (about 292 years)
// work on every store: the claim is held, the outcome replays, a sweep and Recover leave it.
func testLongestDurations(t *testing.T, newStore Factory) {
	t.Parallel()
	eng := fence.New(newStore(t), fence.Config{LeaseTTL: math.MaxInt64, ResultTTL: math.MaxInt64})
	r := req("limits:longest")
	tk := mustFresh(t, eng, r)
	if !tk.LeaseUntil.After(time.Now().Add(200 * 365 * 24 * time.Hour)) {
		t.Fatalf("lease until %s", tk.LeaseUntil)
	}
	if _, err := eng.Prepare(ctx, r); err == nil {
		t.Fatal("a held claim was admitted again")
	}
	if _, err := eng.Heartbeat(ctx, tk); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if n, err := eng.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("recover = %d, %v", n, err)
	}
	c := mustCommit(t, eng, tk, `"kept"`)
	if n, err := eng.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep = %d, %v; want 0", n, err)
	}
	adm, err := eng.Prepare(ctx, r)
	if err != nil || adm.Fresh() || adm.Cert.Hash != c.Hash {
		t.Fatalf("duplicate = %+v, %v; want the replay", adm, err)
	}
	if s, err := eng.Status(ctx, r.Intent); err != nil || s.State != fence.StateDone || !s.ExpiresAt.After(time.Now().Add(200*365*24*time.Hour)) {
		t.Fatalf("status = %s (expires %s), %v", s.State, s.ExpiresAt, err)
	}
}
