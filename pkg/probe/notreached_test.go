package probe_test

import (
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

// TestProbeCallsAfterTheServerExitedAreNotSent: in the retry pattern, a server that exits on
// its first call is gone before the second is sent; the calls that were never written to it
// are not_sent (they did not run), not transport failures "whether they executed is
// unknown". Before, the report said 3 calls were sent and 3 got no answer.
func TestProbeCallsAfterTheServerExitedAreNotSent(t *testing.T) {
	t.Parallel()
	srv := shServer(t, t.TempDir(), "dies.sh", `      exit 3`)
	r := cmdtest.Run(t, nil, bin, "probe", "--json", "--pattern", "retry", "--retry-after", "10s", "--tool", "t", "--calls", "3", "--", srv)
	rep := probeJSON(t, r)
	if r.Code != 1 || rep.TransportFailures != 1 || rep.NotSent != 2 || rep.Succeeded != 0 {
		t.Errorf("exit %d, report %+v; want exit 1, 1 transport failure and 2 not sent", r.Code, rep)
	}
}
