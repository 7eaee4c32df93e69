package store_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/store"
)

// docDurations reads every value a doc states for a default: the first group of each match
// of pattern in path, a number of unit. A reworded sentence fails the test.
func docDurations(t *testing.T, path, pattern string, unit time.Duration) []time.Duration {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(string(b), -1) {
		n, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, m[1], err)
		}
		out = append(out, time.Duration(n*float64(unit)))
	}
	if len(out) == 0 {
		t.Fatalf("%s no longer states this default (no match of %q)", path, pattern)
	}
	return out
}

// TestSweepAndRecoverEveryAsDocumented opens a real SQLite ledger as wrap and serve do, with
// no interval given: its background goroutine sweeps expired outcomes as often as
// docs/ledger.md and docs/privacy.md say (every 10 minutes) and applies the lease rules and
// drains the spool as often as docs/RELIABILITY.md and docs/serve.md say (every 10 s). With a
// result TTL shorter than that, it sweeps once per TTL (Options.SweepEvery).
func TestSweepAndRecoverEveryAsDocumented(t *testing.T) {
	t.Parallel()
	var sweeps, recovers []time.Duration
	sweeps = append(sweeps, docDurations(t, "../../docs/ledger.md", `swept when a process\s+opens the ledger and every ([0-9]+) minutes while it runs`, time.Minute)...)
	sweeps = append(sweeps, docDurations(t, "../../docs/privacy.md", `and every ([0-9]+) minutes while one runs`, time.Minute)...)
	recovers = append(recovers, docDurations(t, "../../docs/RELIABILITY.md", `and every ([0-9]+) s while wrap or serve runs`, time.Second)...)
	recovers = append(recovers, docDurations(t, "../../docs/RELIABILITY.md", "`Recover` \\(every ([0-9]+) s while the process runs", time.Second)...)
	recovers = append(recovers, docDurations(t, "../../docs/RELIABILITY.md", `\(every ([0-9]+) s in wrap and serve\)`, time.Second)...)
	recovers = append(recovers, docDurations(t, "../../docs/serve.md", `\(within ([0-9]+) s, or when any fence process next opens the ledger\)`, time.Second)...)

	ctx := context.Background()
	led, err := store.Open(ctx, store.Options{Ledger: filepath.Join(t.TempDir(), "l.db"), SweepInBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	sweep, rec := led.Intervals()
	for _, d := range sweeps {
		if sweep != d {
			t.Errorf("an open ledger sweeps every %v; the docs say every %v", sweep, d)
		}
	}
	for _, d := range recovers {
		if rec != d {
			t.Errorf("an open ledger recovers every %v; the docs say every %v", rec, d)
		}
	}

	short, err := store.Open(ctx, store.Options{Ledger: filepath.Join(t.TempDir(), "l.db"), ResultTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	if sweep, _ := short.Intervals(); sweep != time.Minute {
		t.Errorf("with a result TTL of 1m an open ledger sweeps every %v, want every 1m0s", sweep)
	}
}
