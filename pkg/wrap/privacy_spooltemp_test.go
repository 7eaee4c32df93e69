package wrap_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSpoolTempLeftByACrashIsRemoved: docs/privacy.md says an outcome waits in the spool, with
// its whole result (a hash-only claim's too), until a process records it and removes the file.
// A process killed half way through a put leaves the put's temporary file, holding such a
// result, which no drain reads: a wrap opening the ledger removes it once it is an hour old,
// and leaves a young one (a put of another process under way) alone.
func TestSpoolTempLeftByACrashIsRemoved(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	if res := call(t, w.Session, "charge", `{"amount":1,"order":"spooltemp"}`); res.IsError {
		t.Fatalf("charge: %+v", res)
	}
	w.Close()
	spool := r.ledger + ".spool"
	if err := os.MkdirAll(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	stale, young := filepath.Join(spool, ".tmp-1234567"), filepath.Join(spool, ".tmp-7654321")
	for _, f := range []string{stale, young} {
		if err := os.WriteFile(f, []byte(`{"kind":"commit","result":{"api_key":"sk_live_crashed"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	w = r.wrap()
	waitFor(t, "the stale temporary file removed", func() bool {
		_, err := os.Stat(stale)
		return os.IsNotExist(err)
	})
	if _, err := os.Stat(young); err != nil {
		t.Fatalf("a young temporary file (a put under way) was removed: %v", err)
	}
	w.Close()
}
