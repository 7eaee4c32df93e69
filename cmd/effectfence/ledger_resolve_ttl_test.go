package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestResolveHappenedSaysHowLongItIsReplayed: a resolve --happened records the intent done for
// the command's own result TTL, not the wraps' (which it cannot know): 24 h unless
// EFFECTFENCE_RESULT_TTL_SECS or --result-ttl-secs says otherwise. Its answer says until when
// duplicates are answered, and --result-ttl-secs sets it (the wraps' TTL, when theirs is
// longer). Before 2026-12-06 the answer said duplicates do not run, without an end, and a
// retry a day later under wraps that keep results a week ran the effect again.
func TestResolveHappenedSaysHowLongItIsReplayed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	fenceIntents(t, path, "pay:day", "pay:week", "pay:no")
	env := []string{store.EnvLedger + "=", store.EnvTTLSecs + "="}
	expiry := func(intent string) time.Duration {
		t.Helper()
		l, err := store.Open(context.Background(), store.Options{Ledger: path})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		rec, err := l.Status(context.Background(), intent)
		if err != nil {
			t.Fatal(err)
		}
		return time.Until(rec.ExpiresAt)
	}
	r := runBinary(t, env, "", "ledger", "resolve", "pay:day", "--happened", "--reason", "seen at the PSP", "--ledger", path)
	if r.code != 0 || !strings.Contains(r.stdout, "do not run, until ") || !strings.Contains(r.stdout, "--result-ttl-secs") {
		t.Fatalf("resolve --happened: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := expiry("pay:day"); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("resolved with no TTL set: expires in %s; want 24 h", d)
	}
	r = runBinary(t, env, "", "ledger", "resolve", "pay:week", "--happened", "--reason", "seen", "--result-ttl-secs", "604800", "--ledger", path)
	if r.code != 0 {
		t.Fatalf("resolve --happened --result-ttl-secs 604800: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := expiry("pay:week"); d < 6*24*time.Hour || d > 8*24*time.Hour {
		t.Errorf("resolved with --result-ttl-secs 604800: expires in %s; want 7 days", d)
	}
	for _, args := range [][]string{
		{"--did-not-happen", "--result-ttl-secs", "60"},
		{"--happened", "--result-ttl-secs", "0"},
	} {
		r = runBinary(t, env, "", append(append([]string{"ledger", "resolve", "pay:no", "--reason", "x"}, args...), "--ledger", path)...)
		if r.code != exitUsage {
			t.Errorf("resolve %v: exit %d; want usage\n%s", args, r.code, r.stderr)
		}
	}
}
