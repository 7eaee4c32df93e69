package probe_test

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeNoCallAnswered holds docs/probe-and-demo.md's exit code 1 for "no call was
// answered": the report still says what happened (every call a transport failure,
// inconclusive), and the exit is not 0, which would read as "no double-fire proven".
func TestProbeNoCallAnswered(t *testing.T) {
	t.Parallel()
	// Exits when it is called: no call is ever answered.
	srv := shServer(t, t.TempDir(), "dies.sh", `      exit 0`)
	r := cmdtest.Run(t, nil, bin, "probe", "--tool", "t", "--calls", "3", "--", srv)
	if r.Code != 1 || !strings.Contains(r.Stderr, "none of the 3 calls was answered") || !strings.Contains(r.Stdout, "INCONCLUSIVE") {
		t.Errorf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	r = cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "t", "--calls", "3", "--", srv)
	rep := probeJSON(t, r)
	if r.Code != 1 || rep.Verdict != probe.Inconclusive || rep.TransportFailures != 3 || rep.Succeeded != 0 {
		t.Errorf("--json: exit %d, report %+v", r.Code, rep)
	}
}
