package probe_test

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeOfOneCallClaimsNoOnce: with one call sent (--calls 1) nothing was duplicated, so
// an executions witness that counts its one run proves nothing about duplicates: the verdict
// is inconclusive and says that only one call was sent. Before 2026-12-07 it was EXACTLY ONCE
// (exit 0), the verdict the fence earns by holding back duplicates, for a call that had none,
// and without a witness the report said it did not know "whether the tool ran once or 1
// times". The real demo server counts the execution.
func TestProbeOfOneCallClaimsNoOnce(t *testing.T) {
	t.Parallel()
	file, witness := effects(t)
	server := []string{"--", bin, "demo-server", "--effects", file}
	for _, withWitness := range []bool{true, false} {
		args := []string{"probe", "--json", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "1"}
		if withWitness {
			args = append(args, "--witness", witness, "--witness-kind", "executions")
		}
		r := cmdtest.Run(t, nil, bin, append(args, server...)...)
		rep := probeJSON(t, r)
		if r.Code != 0 || rep.Verdict != probe.Inconclusive || rep.Succeeded != 1 || strings.Contains(rep.Headline, "ONCE") {
			t.Fatalf("witness %v: exit %d, verdict %s (%s), report %+v", withWitness, r.Code, rep.Verdict, rep.Headline, rep)
		}
		if withWitness && (rep.Witness == nil || rep.Witness.Effects != 1) {
			t.Fatalf("the witness did not count the one execution: %+v", rep.Witness)
		}
		if !strings.Contains(rep.Proven, "only 1 call was sent") || !strings.Contains(rep.NotProven, "duplicate") || strings.Contains(rep.NotProven, "1 times") {
			t.Errorf("witness %v: proven %q, not proven %q", withWitness, rep.Proven, rep.NotProven)
		}
	}
	if n := countLines(t, file); n != 2 {
		t.Fatalf("the server ran %d times, want 2 (one per probe)", n)
	}
}
