//go:build unix

package wrap_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// TestStopEndsWithTheLedgerFrozen: the PostgreSQL ledger stops answering (a stopped database,
// a black-holed network) while calls run, and the agent closes wrap's input. The cut calls'
// outcomes go to the spool, and wrap exits on its own. Before, the ledger stats line wrap
// writes at exit read the ledger with no deadline, and wrap never exited (over a minute here):
// a client that does not SIGKILL kept it forever.
func TestStopEndsWithTheLedgerFrozen(t *testing.T) {
	t.Parallel()
	needProc(t)
	p, ledger := cutLedger(t)
	r := newRig(t)
	r.ledger = ledger
	rw := r.initializedRawWrap("--grace", "1s")
	const n = 4
	for i := range n {
		line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","arguments":{"ms":600000,"tag":"frozen%d"}}}`, i+1, i)
		if _, err := io.WriteString(rw.in, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	// A call reaches the server only once its claim is written.
	waitFor(t, "the calls running in the server", func() bool { return strings.Count(rw.log.String(), " started") == n })
	p.Freeze()
	t.Cleanup(p.Heal)
	start := time.Now()
	rw.in.Close()
	// The grace, the half second the ledger gets for the cut calls, the stats line's second,
	// the engine's bounded flush of its counters (5 s) and the pool's close, bounded at 2 s
	// (about 10 s in all here; 17 s while the pool's close waited for pgx's cancel requests):
	// under this, where it never ended.
	exitWithin(t, rw, 40*time.Second)
	t.Logf("wrap exited %s after its input closed", time.Since(start).Round(100*time.Millisecond))
	if got := len(r.spooled()); got != n {
		t.Fatalf("%d outcomes in the spool, want the %d cut calls'; stderr:\n%s", got, n, rw.log.String())
	}
}
