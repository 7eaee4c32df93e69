package fence_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// BenchmarkReplay: a duplicate of a done intent (the hot path of every retry).
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	r := fence.Request{Intent: "charge:order-123", Tool: "charge_card", Args: []byte(`{"amount":4900,"currency":"usd"}`), Agent: "billing"}
	adm, err := eng.Prepare(ctx, r)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		adm, err := eng.Prepare(ctx, r)
		if err != nil || adm.Fresh() {
			b.Fatal("not a replay", err)
		}
	}
}

// BenchmarkReplayParallel: replays from every core at once.
func BenchmarkReplayParallel(b *testing.B) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	r := fence.Request{Intent: "charge:order-123", Tool: "charge_card", Args: []byte(`{"amount":4900}`)}
	adm, _ := eng.Prepare(ctx, r)
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := eng.Prepare(ctx, r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkFreshCommit: admission and commit of distinct intents on one domain.
func BenchmarkFreshCommit(b *testing.B) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	intents := make([]string, b.N)
	for i := range intents {
		intents[i] = "charge:" + strconv.Itoa(i)
	}
	args := []byte(`{"amount":4900,"currency":"usd"}`)
	result := []byte(`{"charge":"ch"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intents[i], Tool: "charge_card", Args: args, Domain: "acct:1", Agent: "billing"})
		if err != nil || !adm.Fresh() {
			b.Fatal(err)
		}
		if _, err := eng.Commit(ctx, *adm.Ticket, result); err != nil {
			b.Fatal(err)
		}
	}
}
