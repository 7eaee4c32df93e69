package probe_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeAgainThroughWrapsDurableLedger is docs/probe-and-demo.md's "running the same probe
// again replays the recorded result: 12 answers, 0 new effects". The second report must say
// that the executions witness counted nothing and the answers were replays, and must not tell
// the user to add the witness they already have (it did: "whether the tool ran once or 12
// times ... Add a --witness that counts executions").
func TestProbeAgainThroughWrapsDurableLedger(t *testing.T) {
	t.Parallel()
	file, witness := effects(t)
	env := []string{"EFFECTFENCE_LEDGER=" + filepath.Join(t.TempDir(), "ledger.db")}
	args := []string{"probe", "--json", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "12",
		"--witness", witness, "--witness-kind", "executions", "--", bin, "wrap", "--", bin, "demo-server", "--effects", file}

	r := cmdtest.Run(t, env, bin, args...)
	rep := probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.OnceMeasured || rep.Witness.Effects != 1 || rep.Replayed != 11 {
		t.Fatalf("first probe: exit %d, report %+v witness %+v\nstderr:\n%s", r.Code, rep, rep.Witness, r.Stderr)
	}
	r = cmdtest.Run(t, env, bin, args...)
	rep = probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.Inconclusive || rep.Witness.Effects != 0 || rep.Succeeded != 12 || rep.Distinct != 1 || rep.Replayed != 12 ||
		!strings.Contains(rep.Proven, "counted no execution") || strings.Contains(rep.NotProven, "Add a --witness") ||
		!strings.Contains(strings.Join(rep.Notes, " "), "12 answer(s) were marked replayed") {
		t.Fatalf("second probe: exit %d, report %+v witness %+v\nstderr:\n%s", r.Code, rep, rep.Witness, r.Stderr)
	}
	if n := countLines(t, file); n != 1 {
		t.Fatalf("the server ran %d times over both probes, want 1", n)
	}
}
