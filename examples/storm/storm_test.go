package main

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

func TestStormExactlyOnce(t *testing.T) {
	for i := 0; i < 20; i++ {
		eng := fence.New(fence.NewMemoryStore(), fence.Config{})
		var charged atomic.Int64
		res, err := storm(context.Background(), eng, func() []byte { charged.Add(1); return []byte(`"ch"`) })
		if err != nil {
			t.Fatal(err)
		}
		if res.Executions != 1 || charged.Load() != 1 || res.Other != 0 || res.CertHashes != 1 {
			t.Fatalf("run %d: %+v", i, res)
		}
		if got := res.Executions + res.Receipts + res.StoodDown; got != stormAttempt || res.Stats.Total() != stormAttempt {
			t.Fatalf("run %d: %d attempts accounted, stats total %d", i, got, res.Stats.Total())
		}
		if res.Stats.Prevented() != stormAttempt-1 {
			t.Fatalf("prevented = %d", res.Stats.Prevented())
		}
	}
}

// BenchmarkStorm: the whole 1,000-attempt storm, per storm.
func BenchmarkStorm(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		eng := fence.New(fence.NewMemoryStore(), fence.Config{})
		res, err := storm(context.Background(), eng, func() []byte { return []byte(`"ch"`) })
		if err != nil || res.Executions != 1 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
