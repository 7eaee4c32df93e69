package probe_test

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeNullResultIsNotAnAnswer: a tools/call answered with "result": null carries no tool
// result (MCP's SDK clients refuse it), so it is a protocol error, not a successful answer.
// Before 2026-12-07 it was counted as one, "(empty result)", distinct from the server's real
// answer: one charge and two nulls read as PROVEN DOUBLE-FIRE, exit 3.
func TestProbeNullResultIsNotAnAnswer(t *testing.T) {
	t.Parallel()
	srv := shServer(t, t.TempDir(), "nulls.sh", `      if [ "$n" = 1 ]; then
        printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"charged"}]}}\n' "$id"
      else
        printf '{"jsonrpc":"2.0","id":%s,"result":null}\n' "$id"
      fi`)
	r := cmdtest.Run(t, nil, bin, "probe", "--json", "--tool", "t", "--calls", "3", "--", srv)
	rep := probeJSON(t, r)
	if r.Code == 3 || rep.Verdict == probe.DoubleFire || rep.Succeeded != 1 || rep.Distinct != 1 || rep.ProtocolErrors != 2 {
		t.Fatalf("exit %d, verdict %s, succeeded %d, distinct %d, protocol errors %d; failures %+v", r.Code, rep.Verdict, rep.Succeeded, rep.Distinct, rep.ProtocolErrors, rep.Failures)
	}
	if len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0].Message, "not a JSON object") {
		t.Errorf("failures %+v", rep.Failures)
	}
}
