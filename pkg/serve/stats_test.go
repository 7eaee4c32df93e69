package serve_test

import (
	"encoding/json"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestStatsNameTheTotals: fence_stats carries SPEC's total_attempts and prevented for this
// server and for the ledger, as numbers beside the buckets (it had only the buckets and the
// one-line form): one admitted, one replayed and one refused attempt are three attempts,
// two of them prevented.
func TestStatsNameTheTotals(t *testing.T) {
	h := newHarness(t, fence.Config{})
	var p serve.PrepareResult
	h.ok(serve.ToolPrepare, prepareArgs("charge:stats"), &p)
	var c serve.CommitResult
	h.ok(serve.ToolCommit, map[string]any{"ticket": p.Ticket, "result": map[string]any{"charge": "ch_1"}}, &c)
	h.ok(serve.ToolPrepare, prepareArgs("charge:stats"), &p) // replayed
	other := prepareArgs("charge:stats")
	other["args"] = map[string]any{"amount": 1}
	h.refused(serve.ToolPrepare, other) // intent_conflict

	raw, isErr := h.call(serve.ToolStats, nil)
	if isErr {
		t.Fatalf("fence_stats: %s", raw)
	}
	var got struct {
		SinceBoot map[string]json.RawMessage `json:"since_boot"`
		Ledger    map[string]json.RawMessage `json:"ledger"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("fence_stats %s: %v", raw, err)
	}
	for scope, counts := range map[string]map[string]json.RawMessage{"since_boot": got.SinceBoot, "ledger": got.Ledger} {
		for field, want := range map[string]string{"admitted": "1", "replayed": "1", "refused_conflict": "1", "total_attempts": "3", "prevented": "2"} {
			if v := string(counts[field]); v != want {
				t.Errorf("fence_stats %s.%s = %q, want %s (the whole answer: %s)", scope, field, v, want, raw)
			}
		}
	}
}
