package fencetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// testEvictDomainFloorNeverFalls: evicting a domain whose sequence is below the floor leaves
// the floor where it was, so a domain evicted earlier at a higher sequence still reads above
// every number its certs carry; and a number reserved by a claim still in flight when its
// domain is evicted is not handed out again (the claim's cert then carries it alone).
func testEvictDomainFloorNeverFalls(t *testing.T, newStore Factory) {
	t.Parallel()
	eng := fence.New(newStore(t), fence.Config{})
	small := mustCommit(t, eng, mustFresh(t, eng, fence.Request{Intent: "small:0", Tool: "t", Domain: "small"}), `1`).Seq
	var high uint64
	for i := 0; i < 5; i++ {
		high = mustCommit(t, eng, mustFresh(t, eng, fence.Request{Intent: fmt.Sprintf("high:%d", i), Tool: "t", Domain: "high"}), `1`).Seq
	}
	if err := eng.EvictDomain(ctx, "high"); err != nil {
		t.Fatal(err)
	}
	// "small" still has its row, at a number below the floor "high" left.
	if err := eng.EvictDomain(ctx, "small"); err != nil {
		t.Fatal(err)
	}
	if cur, _ := eng.Current(ctx, "high"); cur < high {
		t.Fatalf("high reads %d after small was evicted at %d; its certs carry up to %d", cur, small, high)
	}
	again := mustCommit(t, eng, mustFresh(t, eng, fence.Request{Intent: "high:again", Tool: "t", Domain: "high"}), `1`)
	if again.Seq <= high {
		t.Fatalf("high handed out %d again (its certs carry up to %d)", again.Seq, high)
	}

	// A claim in flight holds its number through an eviction of its domain.
	inflight := mustFresh(t, eng, fence.Request{Intent: "held:0", Tool: "t", Domain: "held"})
	if err := eng.EvictDomain(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	next := mustFresh(t, eng, fence.Request{Intent: "held:1", Tool: "t", Domain: "held"})
	if next.Seq <= inflight.Seq {
		t.Fatalf("after evicting a domain with a claim in flight at %d, the next claim took %d", inflight.Seq, next.Seq)
	}
	a, b := mustCommit(t, eng, inflight, `1`), mustCommit(t, eng, next, `2`)
	if a.Seq == b.Seq {
		t.Fatalf("two certs of domain held carry seq %d", a.Seq)
	}
}

// testEvictDomainRacingClaims: an operator evicting a domain again and again while agents
// claim on it never lets two certs of the domain carry the same number.
func testEvictDomainRacingClaims(t *testing.T, newStore Factory) {
	t.Parallel()
	eng := fence.New(newStore(t), fence.Config{})
	const agents, each = 4, 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seqs = map[uint64]string{}
		stop = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := eng.EvictDomain(ctx, "contended"); err != nil {
				t.Errorf("evict: %v", err)
				return
			}
		}
	}()
	var claims sync.WaitGroup
	for a := 0; a < agents; a++ {
		claims.Add(1)
		go func(a int) {
			defer claims.Done()
			for i := 0; i < each; i++ {
				intent := fmt.Sprintf("c:%d:%d", a, i)
				adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Domain: "contended"})
				if err != nil || !adm.Fresh() {
					t.Errorf("%s: %+v %v", intent, adm, err)
					return
				}
				c, err := eng.Commit(ctx, *adm.Ticket, []byte(`1`))
				if err != nil {
					t.Errorf("%s commit: %v", intent, err)
					return
				}
				mu.Lock()
				if prev, dup := seqs[c.Seq]; dup {
					t.Errorf("seq %d of domain contended carried by %s and %s", c.Seq, prev, intent)
				}
				seqs[c.Seq] = intent
				mu.Unlock()
			}
		}(a)
	}
	claims.Wait()
	close(stop)
	wg.Wait()
	if len(seqs) != agents*each {
		t.Fatalf("%d distinct numbers for %d certs", len(seqs), agents*each)
	}
}
