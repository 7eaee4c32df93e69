package wrap_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestServerCommandLineNotInTheLedger: docs/privacy.md says what an unknown outcome's reason
// holds under wrap: the server's error message or the end of its stderr. A server's command
// line often carries a secret of its own (`--api-key sk_live_…`, mcp-remote's `--header
// Authorization:Bearer …`); it must not reach the ledger through the reason of a call the
// server died during, nor wrap's log (docs/privacy.md: wrap names the server by its program).
func TestServerCommandLineNotInTheLedger(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const secret = "sk_live_CMDLINE7Q2ZP"
	r.childCmdOverride = []string{testExe, "-test.run=^$", "--api-key=" + secret}
	w := r.wrap()
	res := call(t, w.Session, "die", `{"tag":"plain"}`)
	if !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	ledgerFilesLack(t, r, secret)
	// Nor in wrap's log: it names the program and counts its arguments.
	if log := w.log.String(); strings.Contains(log, secret) || !strings.Contains(log, "serving "+filepath.Base(testExe)+" (and 2 arguments") {
		t.Errorf("wrap's log holds the command line, or does not name the program:\n%s", log)
	}
	intent := res.intent()
	rec, err := r.openLedger().Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown || !strings.Contains(rec.Reason, `dying on tools/call`) {
		t.Fatalf("record of %q: %+v, %v; want an unknown outcome whose reason keeps the server's words", intent, rec, err)
	}
}
