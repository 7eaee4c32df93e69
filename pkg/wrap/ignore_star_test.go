package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A "*" segment matches every member or element in a --redact path (docs/privacy.md), but
// --key and --ignore-field paths (and a policy's key and ignore) are plain member names
// (docs/policy.md: "dotted member names"). wrap took `--ignore-field charge:items.*.ts` for a
// member named "*", which no call has: the field was never ignored, so a retry with a fresh
// timestamp was another call and ran again. Such a path is refused at start, for a flag and
// for a policy file alike, and nothing runs.
func TestStarInKeyOrIgnorePathRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	policy := filepath.Join(r.dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("version: 1\ntools:\n  charge:\n    ignore: [items.*.ts]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{
		{"--ignore-field", "charge:items.*.ts"},
		{"--ignore-field", "charge:*"},
		{"--key", "charge:order,*.id"},
		{"--policy", policy},
	} {
		w, err := r.tryWrap(bad...)
		if err == nil {
			w.Close()
			t.Errorf("wrap %v started: a * in a key or ignored path names a member called *", bad)
			continue
		}
		if !strings.Contains(err.Error(), `"*"`) {
			t.Errorf("wrap %v: the refusal does not name the *: %v", bad, err)
		}
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d effects", n)
	}
}
