package probe_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeWitnessFailingAfterTheCallsKeepsTheReport: the calls were made, so a witness that
// reads before them and fails after them must not cost the report. Answers that prove a
// double-fire still exit 3; equal answers exit 1 (the witness failed), with the report printed
// and the failure in witness_error. Before, both printed only "cannot run" and exited 1.
func TestProbeWitnessFailingAfterTheCallsKeepsTheReport(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		tool, args string
		code       int
		verdict    probe.Verdict
	}{
		{"charge_card", `{"amount":4900}`, 3, probe.DoubleFire},
		{"record_event", `{"name":"signup"}`, 1, probe.Inconclusive},
	} {
		t.Run(c.tool, func(t *testing.T) {
			t.Parallel()
			file, _ := effects(t)
			flag := filepath.Join(t.TempDir(), "read-once")
			// Reads 0 the first time; the second time says the database is down.
			witness := fmt.Sprintf("if [ -e %q ]; then echo 'database is down' >&2; exit 1; fi; : > %q; echo 0", flag, flag)
			r := cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", c.tool, "--args", c.args, "--calls", "4",
				"--witness", witness, "--witness-kind", "executions", "--", bin, "demo-server", "--effects", file)
			rep := probeJSON(t, r)
			if r.Code != c.code || rep.Verdict != c.verdict || rep.Succeeded != 4 || rep.Witness != nil ||
				!strings.Contains(rep.WitnessError, "database is down") || !strings.Contains(strings.Join(rep.Notes, " "), "rests on the answers alone") {
				t.Fatalf("exit %d (want %d), report %+v\nstderr:\n%s", r.Code, c.code, rep, r.Stderr)
			}
			if c.code == 1 && !strings.Contains(r.Stderr, "the 4 calls were made") {
				t.Errorf("stderr does not say the calls were made: %q", r.Stderr)
			}
			if n := countLines(t, file); n != 4 {
				t.Fatalf("the server ran %d times, want 4", n)
			}
		})
	}
}
