package wrap_test

import (
	"context"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestRedactedMemberNamesNotInReasons: a redacted path names an object; the record keeps
// "[redacted]" for all of it, its member names too. A server that echoes the request it died
// on must not bring those names (here card numbers keying a map) back into the ledger:
// docs/privacy.md, "each string at or under a redacted path".
func TestRedactedMemberNamesNotInReasons(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const secret = "4111222233334444"
	const spelled, decoded = `55001111\u00322222`, "5500111122222" // a name with an escape of its own
	w := r.wrap("--redact", "die:cards")
	res := call(t, w.Session, "die", `{"cards":{"`+secret+`":{"limit":5},"`+spelled+`":{}},"tag":"plain"}`)
	if !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	for _, s := range []string{secret, spelled, decoded} {
		ledgerFilesLack(t, r, s)
	}
	intent := res.intent()
	rec, err := r.openLedger().Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown || !strings.Contains(rec.Reason, `"tag":"plain"`) {
		t.Fatalf("record of %q: %+v, %v; want an unknown outcome whose reason keeps the server's words", intent, rec, err)
	}
}
