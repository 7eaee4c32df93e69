package fence

import "testing"

// Tools that the slot's cheap tool hash cannot tell apart (same length, same first and last
// eight bytes) share a slot for the same arguments: each lookup is then a miss or its own
// entry, never the other tool's.
func TestFPCacheNeverAnswersForAnotherTool(t *testing.T) {
	f := newFPCache()
	raw := []byte(`{"a":1}`)
	tools := []string{"prefix__X__suffix", "prefix__Y__suffix", "short", "shorT", ""}
	for round := range 3 {
		for i, tool := range tools {
			if canonical, fp, ok := f.get(tool, raw); ok && (fp != tool || string(canonical) != tool) {
				t.Fatalf("round %d: %q got the entry of %q", round, tool, fp)
			}
			if round > 0 && i%2 != round%2 {
				continue
			}
			f.put(tool, raw, []byte(tool), tool)
			if _, fp, ok := f.get(tool, raw); !ok || fp != tool {
				t.Fatalf("round %d: %q missed just after its put (%q, %v)", round, tool, fp, ok)
			}
		}
	}
}
