package probe_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeStateWitnessNeverClaimsOnce: the case. A tool runs 8 times, answers the
// same each time, and leaves a state that reads as one change (here: "the file is non-empty").
// A state witness must not turn that into EXACTLY ONCE; counting executions proves the double.
func TestProbeStateWitnessNeverClaimsOnce(t *testing.T) {
	t.Parallel()
	file, counter := effects(t)
	state := fmt.Sprintf("test -s %q && echo 1 || echo 0", file)
	server := []string{"--", bin, "demo-server", "--effects", file}
	args := []string{"probe", "--json", "--tool", "record_event", "--args", `{"name":"signup"}`, "--calls", "8"}

	r := cmdtest.Run(t, nil, bin, append(append(args, "--witness", state), server...)...)
	rep := probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.Inconclusive || strings.Contains(rep.Headline, "ONCE") ||
		rep.Witness.Kind != probe.State || rep.Witness.Effects != 1 || !strings.Contains(strings.Join(rep.Notes, " "), "does not show the tool ran once") {
		t.Fatalf("state witness: exit %d, report %+v witness %+v", r.Code, rep, rep.Witness)
	}
	if n := countLines(t, file); n != 8 {
		t.Fatalf("the server ran %d times, want 8 (the state hid them)", n)
	}
	text := cmdtest.Run(t, nil, bin, append([]string{"probe", "--tool", "record_event", "--args", `{"name":"signup"}`, "--calls", "8", "--witness", state}, server...)...)
	if strings.Contains(text.Stdout, "EXACTLY ONCE") || !strings.Contains(text.Stdout, "INCONCLUSIVE") {
		t.Fatalf("text report with a state witness:\n%s", text.Stdout)
	}

	r = cmdtest.Run(t, nil, bin, append(append(args, "--witness", counter, "--witness-kind", "executions"), server...)...)
	rep = probeJSON(t, r)
	if r.Code != 3 || rep.Verdict != probe.DoubleFire || rep.Witness.Effects != 8 {
		t.Fatalf("executions witness: exit %d, report %+v witness %+v", r.Code, rep, rep.Witness)
	}
}

// TestProbeRetryPattern: the same call sent again after each answer double-applies on a raw
// server and runs once behind wrap.
func TestProbeRetryPattern(t *testing.T) {
	t.Parallel()
	file, counter := effects(t)
	args := []string{"probe", "--json", "--pattern", "retry", "--retry-after", "10s", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "4",
		"--witness", counter, "--witness-kind", "executions"}
	r := cmdtest.Run(t, nil, bin, append(args, "--", bin, "demo-server", "--effects", file)...)
	rep := probeJSON(t, r)
	if r.Code != 3 || rep.Pattern != probe.Retry || rep.Verdict != probe.DoubleFire || rep.Distinct != 4 || rep.Witness.Effects != 4 ||
		rep.RetriesBeforeAnswer != 0 || !strings.Contains(rep.Proven, "one after another") {
		t.Fatalf("raw server: exit %d, report %+v witness %+v", r.Code, rep, rep.Witness)
	}
	r = cmdtest.Run(t, []string{"EFFECTFENCE_LEDGER=memory"}, bin, append(args, "--", bin, "wrap", "--", bin, "demo-server", "--effects", file)...)
	rep = probeJSON(t, r)
	if r.Code != 0 || rep.Verdict != probe.OnceMeasured || rep.Distinct != 1 || rep.Succeeded != 4 || rep.Witness.Effects != 1 {
		t.Fatalf("behind wrap: exit %d, report %+v witness %+v\nstderr:\n%s", r.Code, rep, rep.Witness, r.Stderr)
	}
}

// TestProbeWitnessExitNonZeroWithNumber: `grep -c` prints 0 and exits 1 on an empty file;
// that reading is a number, not a failure.
func TestProbeWitnessExitNonZeroWithNumber(t *testing.T) {
	t.Parallel()
	file, _ := effects(t)
	r := cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "3",
		"--witness", fmt.Sprintf("grep -c . %q", file), "--witness-kind", "executions", "--", bin, "demo-server", "--effects", file)
	rep := probeJSON(t, r)
	if r.Code != 3 || rep.Witness == nil || rep.Witness.Before != 0 || rep.Witness.After != 3 {
		t.Fatalf("exit %d, report %+v witness %+v\nstderr:\n%s", r.Code, rep, rep.Witness, r.Stderr)
	}
}
