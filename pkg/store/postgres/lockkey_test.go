package postgres

import (
	"strings"
	"testing"
)

// TestLockKeysDoNotChange: the advisory lock keys are what every build takes, so processes of
// different builds sharing a ledger take the same locks: these are the keys of the first
// implementation (a streaming SHA-256 of schema, NUL, kind, NUL, name).
func TestLockKeysDoNotChange(t *testing.T) {
	for _, c := range []struct {
		schema, kind, name string
		want               int64
	}{
		{"public", "intent", "charge:1", 3777164633968958487},
		{"effectfence", "migrate", "", -335860351963254877},
		{"s", "intent", strings.Repeat("i", 300), -3676206981887465794}, // longer than the stack buffer
	} {
		if got := lockKey(c.schema, c.kind, c.name); got != c.want {
			t.Errorf("lockKey(%q, %q, %d bytes) = %d, want %d", c.schema, c.kind, len(c.name), got, c.want)
		}
	}
}
