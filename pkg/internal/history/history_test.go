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
// long ones) and fails on any violation, printing operations, faults and violations. The
// containers case runs wraps 0 and 2 each in a PID namespace of its own (Config.Containers),
// and the fulldisk case the SQLite ledger on a tmpfs the nemesis fills and frees
// (Config.FullDisk), each for 10 s beside the others' 20: they add no time to the test, only
// load.
func TestHistory(t *testing.T) {
	for _, c := range []struct {
		ledger, front        string
		containers, fullDisk bool
	}{{"sqlite", "stdio", false, false}, {"postgres", "stdio", false, false}, {"postgres", "http", false, false}, {"sqlite", "stdio", true, false}, {"sqlite", "stdio", false, true}} {
		ledger := c.ledger
		name, d := ledger+"/"+c.front, 20*time.Second
		if c.containers {
			name, d = name+"/containers", 10*time.Second
		}
		if c.fullDisk {
			name, d = name+"/fulldisk", 10*time.Second
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pg := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
			if ledger == "postgres" && pg == "" {
				t.Skip("SKIP-REQUIRED: set EFFECTFENCE_TEST_POSTGRES to run the history checker on PostgreSQL")
			}
			if c.containers {
				if os.Geteuid() != 0 {
					t.Skip("skipped: wraps in containers need root (unshare --pid --mount-proc)")
				}
				if _, err := exec.LookPath("unshare"); err != nil {
					t.Skip("skipped: wraps in containers need the unshare command (util-linux)")
				}
			}
			if c.fullDisk && os.Geteuid() != 0 {
				t.Skip("skipped: a full disk needs a tmpfs of the run's own (mount: root)")
			}
			rep, err := history.Run(context.Background(), history.Config{
				Seed: 11, Duration: d, Ledger: ledger, Postgres: pg,
				Bin: bin, Child: []string{child}, Dir: t.TempDir(), Log: testLog{t}, Front: c.front, Containers: c.containers, FullDisk: c.fullDisk,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + rep.Summary())
			if len(rep.Ops) < 20 || len(rep.Faults) < 3 {
				t.Fatalf("too little happened to prove anything: %d calls, %d faults", len(rep.Ops), len(rep.Faults))
			}
			if c.containers && !faultIn(rep, "in its container") {
				t.Fatalf("no fault reached a wrap in a container or its child: nothing proven about them")
			}
			if c.fullDisk && len(rep.DiskFull) == 0 {
				t.Fatalf("the ledger's disk was never full: nothing proven about it")
			}
			if len(rep.Violations) > 0 {
				t.Fatalf("%d violations of the fence's promise (see the summary above)", len(rep.Violations))
			}
		})
	}
}

// faultIn reports whether a fault's target says what.
func faultIn(rep *history.Report, what string) bool {
	for _, f := range rep.Faults {
		if strings.Contains(f.Target, what) {
			return true
		}
	}
	return false
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
