package wrap_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/pgtest"
)

// TestRedactedAndHashOnlyNeverReachThePostgresLedger: docs/privacy.md's promises through a
// real wrap process on a PostgreSQL ledger, every table of its schema read back whole (and
// the spool directory under the state directory): a value the server logged for an earlier
// call, then printed with the rest of its stderr as it died during a later one; a value the
// call spelled with escapes of its own, printed as received; and the result of a hash-only
// tool, also after a duplicate was answered.
func TestRedactedAndHashOnlyNeverReachThePostgresLedger(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.ledger = pgtest.Ledger(t, "wrappriv")
	const logged = "4111222233334444"
	const spelled, decoded = `6011\u00300000999988`, "60110000999988"
	w := r.wrap("--redact", "slow:tag", "--redact", "die:tag", "--keep-result", "charge=hash")
	if res := call(t, w.Session, "slow", `{"tag":"`+logged+`","ms":1}`); res.IsError {
		t.Fatalf("slow: %+v", res)
	}
	first := call(t, w.Session, "charge", `{"amount":700,"order":"pg-priv"}`)
	var sc struct {
		ChargeID string `json:"charge_id"`
	}
	if first.IsError || json.Unmarshal(first.StructuredContent, &sc) != nil || sc.ChargeID == "" {
		t.Fatalf("charge: %+v", first)
	}
	if dup := call(t, w.Session, "charge", `{"amount":700,"order":"pg-priv"}`); !dup.replayed() || string(dup.Meta["effectfence/result_not_kept"]) != "true" {
		t.Fatalf("duplicate of a hash-only call: %+v", dup)
	}
	if res := call(t, w.Session, "die", `{"tag":"`+spelled+`"}`); !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	rows := schemaRows(t, r.ledger)
	if !bytes.Contains(rows, []byte("mcptest: slow tag=")) || !bytes.Contains(rows, []byte("dying on tools/call")) {
		t.Fatalf("the ledger lacks the dying server's words (the test proves nothing):\n%s", rows)
	}
	// The spelling as a record's JSON writes it too (its backslash escaped).
	for _, secret := range []string{logged, spelled, strings.ReplaceAll(spelled, `\`, `\\`), decoded, sc.ChargeID} {
		if holds(rows, secret) {
			t.Errorf("the PostgreSQL ledger holds %q", secret)
		}
		_ = filepath.WalkDir(filepath.Join(r.dir, "state"), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if b, _ := os.ReadFile(p); holds(b, secret) {
					t.Errorf("%s holds %q", p, secret)
				}
			}
			return nil
		})
	}
}

// schemaRows returns every row of every table in the ledger's schema (pgtest.Rows).
func schemaRows(t *testing.T, ledger string) []byte { return pgtest.Rows(t, ledger) }
