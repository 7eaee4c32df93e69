package fence

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
)

// Tools that the slot's cheap tool hash cannot tell apart (same length, same first and last
// eight bytes) share a slot for the same arguments: each lookup is then a miss or its own
// entry, never the other tool's.
func TestFPCacheNeverAnswersForAnotherTool(t *testing.T) {
	f := newFPCache()
	raw := []byte(`{"a":1}`)
	tools := []string{"prefix__X__suffix", "prefix__Y__suffix", "short", "shorT", ""}
	for round := range 3 {
		for i, tool := range tools {
			if _, canonical, fp, ok := f.get(tool, raw); ok && (fp != tool || string(canonical) != tool) {
				t.Fatalf("round %d: %q got the entry of %q", round, tool, fp)
			}
			if round > 0 && i%2 != round%2 {
				continue
			}
			f.put(f.slot(tool, raw), tool, raw, []byte(tool), tool)
			if _, _, fp, ok := f.get(tool, raw); !ok || fp != tool {
				t.Fatalf("round %d: %q missed just after its put (%q, %v)", round, tool, fp, ok)
			}
		}
	}
}

// Arguments over fpCacheMaxBytes are cached too, in a table that never holds more than
// fpBigBudget bytes: old entries go, the newest stays, and its bookkeeping matches what its
// slots hold. Arguments over fpBigMaxBytes are not cached; small ones still are.
func TestFPCacheBigArgs(t *testing.T) {
	t.Parallel()
	f := newFPCache()
	sizes := []int{fpCacheMaxBytes + 1, 32 << 10, 300 << 10, fpBigMaxBytes}
	for i := range 400 {
		raw := bytes.Repeat([]byte{'a' + byte(i%26)}, sizes[i%len(sizes)])
		raw[0] = byte(i >> 8)
		fp := fmt.Sprint("fp", i)
		f.put(f.slot("tool", raw), "tool", raw, raw[:len(raw)/2], fp)
		if _, _, got, ok := f.get("tool", raw); !ok || got != fp {
			t.Fatalf("put %d (%d bytes): the newest entry is not cached (%q, %v)", i, len(raw), got, ok)
		}
		if _, _, _, ok := f.get("other", raw); ok {
			t.Fatalf("put %d: another tool hit the entry", i)
		}
		sum := 0
		f.big.Each(func(e *fpEntry) { sum += e.cost() })
		if sum != f.big.Bytes() || sum > fpBigBudget {
			t.Fatalf("put %d: the big table holds %d bytes, counts %d, budget %d", i, sum, f.big.Bytes(), fpBigBudget)
		}
	}
	huge := make([]byte, fpBigMaxBytes+1)
	f.put(f.slot("tool", huge), "tool", huge, huge, "huge")
	if _, _, _, ok := f.get("tool", huge); ok {
		t.Fatal("arguments over fpBigMaxBytes were cached")
	}
	expanded := make([]byte, 64<<10)
	f.put(f.slot("tool", expanded), "tool", expanded, make([]byte, fpBigBudget/4), "expanded")
	if _, _, _, ok := f.get("tool", expanded); ok {
		t.Fatal("an entry over a quarter of the budget was cached")
	}
	small := []byte(`{"a":1}`)
	f.put(f.slot("tool", small), "tool", small, small, "small")
	if _, _, fp, ok := f.get("tool", small); !ok || fp != "small" {
		t.Fatal("small arguments were not cached")
	}
}

// slot is the slot get would return for the call.
func (f *fpCache) slot(tool string, raw []byte) *atomic.Pointer[fpEntry] {
	return f.slotOf(f.hash(tool, raw), len(raw))
}
