package fence

import (
	"sync"
	"testing"
)

// Counts added, taken and given back from many goroutines at once each land exactly once:
// in a delta kept (written) or in what stays pending.
func TestCounterTakeGiveExactlyOnce(t *testing.T) {
	var k counter
	const workers, rounds = 4, 2000
	var mu sync.Mutex
	var kept Counters
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				k.add(bucket((w + i) % int(nBuckets)))
				if i%3 == 0 {
					d := k.take()
					if i%2 == 0 {
						k.give(d) // a failed write gives its delta back
						continue
					}
					mu.Lock()
					kept = kept.Add(d)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	boot := k.snapshot()
	if got := kept.Add(k.unflushed()); got != boot {
		t.Fatalf("kept %+v + pending %+v != counted %+v", kept, k.unflushed(), boot)
	}
	if boot.Total()+boot.LeaseLost != workers*rounds {
		t.Fatalf("counted %d, want %d", boot.Total()+boot.LeaseLost, workers*rounds)
	}
	kept = kept.Add(k.take())
	if kept != boot || !k.unflushed().IsZero() || !k.take().IsZero() {
		t.Fatalf("after the last take: kept %+v, counted %+v, pending %+v", kept, boot, k.unflushed())
	}
}

// IsZero looks at every field.
func TestCountersIsZero(t *testing.T) {
	if !(Counters{}).IsZero() {
		t.Fatal("zero counters are not zero")
	}
	for b := range nBuckets {
		var c Counters
		*c.field(b) = 1
		if c.IsZero() {
			t.Errorf("bucket %d set, IsZero says zero", b)
		}
	}
}
