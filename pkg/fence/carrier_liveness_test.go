package fence

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// TestCustomLivenessJudgesTheOwnerItKnows: a Liveness of the caller's own (here a registry of
// the workers that run, keyed by Config.Owner, answering dead for any other string) is given
// the owner strings its engines made, not with a carrier it never heard of added: otherwise a
// live worker's claim made with a carrier (wrap over a library user's engine names its
// server's group on every claim) reads as a stranger's, dead, and is taken over while it runs.
func TestCustomLivenessJudgesTheOwnerItKnows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	running := map[string]bool{"worker-a": true, "worker-b": true}
	registry := func(owner string) Liveness {
		if running[owner] {
			return Alive
		}
		return Dead
	}
	store := NewMemoryStore()
	a := New(store, Config{Owner: "worker-a", Liveness: registry, LeaseTTL: time.Hour})
	b := New(store, Config{Owner: "worker-b", Liveness: registry, LeaseTTL: time.Hour})
	if _, err := a.Prepare(ctx, Request{Intent: "pay", Tool: "t", RerunSafe: true, Carrier: "g4242.17"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(ctx, Request{Intent: "pay", Tool: "t", RerunSafe: true}); !errors.As(err, new(InFlightError)) {
		t.Fatalf("another worker's attempt while worker-a runs its claim: %v, want in flight (not taken over)", err)
	}
	// The default judge still reads the carrier.
	if l := New(store, Config{}).Config().Liveness("h+g4242.17/1/1/b/n"); l != CannotTell {
		t.Fatalf("default Liveness of another namespace's owner: %s", l)
	}
}

// TestCarrierPgidBeyondPidMax: a carrier naming a group no pid can have is no carrier (kill
// takes a 32-bit pid: 2^32+1 would probe every process, 2^33 this process's own group).
func TestCarrierPgidBeyondPidMax(t *testing.T) {
	t.Parallel()
	for _, pgid := range []int{1<<32 + 1, 1 << 33, maxPid + 1} {
		c := "g" + strconv.Itoa(pgid) + ".5"
		if _, _, ok := parseCarrier(c); ok {
			t.Errorf("%s read as a carrier", c)
		}
		if base, got := splitCarrier("h+" + c + "/1/2/b/n"); got != "" || base != "h+"+c+"/1/2/b/n" {
			t.Errorf("%s split off: %q %q", c, base, got)
		}
	}
	if _, _, ok := parseCarrier("g4194303.5"); !ok {
		t.Error("the largest pid refused")
	}
}
