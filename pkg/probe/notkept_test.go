package probe_test

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeThroughWrapKeepHashIsNotDoubleFire: behind `wrap --keep-result TOOL=hash` the first
// caller gets the tool's answer and every duplicate gets wrap's notice that the call already
// ran (its result was kept only as a hash). Two different texts, one execution: the probe must
// not call that a double-fire (it did, exit 3, before the notice was recognised).
func TestProbeThroughWrapKeepHashIsNotDoubleFire(t *testing.T) {
	t.Parallel()
	file, witness := effects(t)
	server := []string{"--", bin, "wrap", "--keep-result", "charge_card=hash", "--", bin, "demo-server", "--effects", file}
	args := []string{"probe", "--json", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "6"}
	env := []string{"EFFECTFENCE_LEDGER=memory"}

	r := cmdtest.Run(t, env, bin, append(args, server...)...)
	rep := probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.Inconclusive || rep.Succeeded != 6 || rep.Distinct != 1 || rep.ResultNotKept != 5 {
		t.Fatalf("exit %d, report %+v\nstderr:\n%s", r.Code, rep, r.Stderr)
	}
	if n := countLines(t, file); n != 1 {
		t.Fatalf("the server ran %d times, want 1", n)
	}

	r = cmdtest.Run(t, env, bin, append(append(args, "--witness", witness, "--witness-kind", "executions"), server...)...)
	rep = probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.OnceMeasured || rep.Witness.Effects != 1 || rep.Distinct != 1 || rep.ResultNotKept != 5 ||
		!strings.Contains(strings.Join(rep.Notes, " "), "kept only as a hash") {
		t.Fatalf("with an executions witness: exit %d, report %+v witness %+v", r.Code, rep, rep.Witness)
	}
}
