//go:build linux

package history_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/history"
)

var bin, child string

// TestMain builds effectfence and the history command (the child MCP server) without the race
// detector: this test is about the protocol's history, and the race detector's cost on a
// loaded machine would leave too few calls in the run (the wrap tests run race-built wraps).
func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "effectfence-history-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, child = filepath.Join(dir, "effectfence"), filepath.Join(dir, "history")
	for out, pkg := range map[string]string{bin: "github.com/effectfence/effectfence/cmd/effectfence", child: "github.com/effectfence/effectfence/pkg/internal/history/cmd/history"} {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", pkg+":", err)
			return 1
		}
	}
	return m.Run()
}

// TestHistory runs a short seed of the history checker on each ledger (scripts/history runs
// long ones) and fails on any violation, printing operations, faults and violations.
func TestHistory(t *testing.T) {
	for _, c := range []struct{ ledger, front string }{{"sqlite", "stdio"}, {"postgres", "stdio"}, {"postgres", "http"}} {
		ledger := c.ledger
		t.Run(ledger+"/"+c.front, func(t *testing.T) {
			t.Parallel()
			pg := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
			if ledger == "postgres" && pg == "" {
				t.Skip("SKIP-REQUIRED: set EFFECTFENCE_TEST_POSTGRES to run the history checker on PostgreSQL")
			}
			rep, err := history.Run(context.Background(), history.Config{
				Seed: 11, Duration: 20 * time.Second, Ledger: ledger, Postgres: pg,
				Bin: bin, Child: []string{child}, Dir: t.TempDir(), Log: testLog{t}, Front: c.front,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + rep.Summary())
			if len(rep.Ops) < 20 || len(rep.Faults) < 3 {
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
