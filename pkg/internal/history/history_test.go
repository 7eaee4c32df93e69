//go:build linux

package history_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/internal/history"
)

var bin string

func TestMain(m *testing.M) {
	history.MaybeServeChild()
	os.Exit(cmdtest.Main(m, &bin))
}

// TestHistory runs a short seed of the history checker on each ledger (scripts/history runs
// long ones) and fails on any violation, printing operations, faults and violations.
func TestHistory(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, ledger := range []string{"sqlite", "postgres"} {
		t.Run(ledger, func(t *testing.T) {
			t.Parallel()
			pg := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
			if ledger == "postgres" && pg == "" {
				t.Skip("SKIP-REQUIRED: set EFFECTFENCE_TEST_POSTGRES to run the history checker on PostgreSQL")
			}
			rep, err := history.Run(context.Background(), history.Config{
				Seed: 11, Duration: 20 * time.Second, Ledger: ledger, Postgres: pg,
				Bin: bin, Child: []string{self}, Dir: t.TempDir(), Log: testLog{t},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + rep.Summary())
			if len(rep.Ops) < 100 || len(rep.Faults) < 5 {
				t.Fatalf("too little happened to prove anything: %d calls, %d faults", len(rep.Ops), len(rep.Faults))
			}
			if len(rep.Violations) > 0 {
				t.Fatalf("%d violations of the fence's promise (see the summary above)", len(rep.Violations))
			}
		})
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
