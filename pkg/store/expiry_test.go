package store_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

func TestOnLeaseExpiryFromEnv(t *testing.T) {
	for env, want := range map[string]fence.ExpiryPolicy{"": fence.Fence, "fence": fence.Fence, "reclaim": fence.Reclaim} {
		t.Setenv(store.EnvOnLeaseExpiry, env)
		o, err := store.FromEnv("server")
		if err != nil || o.OnLeaseExpiry != want {
			t.Fatalf("%s=%q: %q %v; want %q", store.EnvOnLeaseExpiry, env, o.OnLeaseExpiry, err, want)
		}
	}
	t.Setenv(store.EnvOnLeaseExpiry, "sometimes")
	if _, err := store.FromEnv("server"); err == nil || !strings.Contains(err.Error(), store.EnvOnLeaseExpiry) {
		t.Fatalf("a bad policy: %v; want an error naming %s", err, store.EnvOnLeaseExpiry)
	}
}

func TestSpoolDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/state")
	for loc, want := range map[string]string{
		"memory":                   "",
		"/var/ledger.db":           "/var/ledger.db.spool",
		"postgres://u:secret@db/x": filepath.Join("/state", "effectfence", "spool"),
	} {
		got, err := store.SpoolDir(loc)
		if err != nil || !strings.HasPrefix(got, want) || (want == "" && got != "") || strings.Contains(got, "secret") {
			t.Fatalf("SpoolDir(%q) = %q, %v; want under %q", loc, got, err, want)
		}
	}
	a, _ := store.SpoolDir("postgres://u:one@db/x")
	b, _ := store.SpoolDir("postgres://u:two@db/x")
	c, _ := store.SpoolDir("postgres://u:one@db/y")
	if a != b || a == c {
		t.Fatalf("spool of a PostgreSQL ledger must depend on the database, not the password: %s %s %s", a, b, c)
	}
}
