package ledgerturn_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/ledgerturn"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// A writer that holds the ledger's turn most of the time: the helper process of
// TestStopOutsideTurn.
func init() {
	path := os.Getenv("EFFECTFENCE_TEST_TURN_HOLDER")
	if path == "" {
		return
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		os.Exit(3)
	}
	os.WriteFile(path+".ready", nil, 0o600)
	for {
		// A transaction that holds the write lock (and the queue) for 20 ms of every 22.
		_ = st.Update(ctx, func(tx fence.Tx) error {
			_, err := tx.NextToken()
			time.Sleep(20 * time.Millisecond)
			return err
		})
		time.Sleep(2 * time.Millisecond)
	}
}

func TestStopOutsideTurn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	cmd := startHelper(t, "EFFECTFENCE_TEST_TURN_HOLDER="+path)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer never opened the ledger")
		}
	}
	most := 0
	for round := range 10 {
		stops, err := ledgerturn.StopOutsideTurn(cmd.Process.Pid, path)
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, stops)
		// Stopped outside its turn, it stays out of it: another process can take the turn.
		for range 3 {
			if held, err := ledgerturn.TurnHeld(path); err != nil || held {
				t.Fatalf("round %d: stopped after %d tries, and the ledger's turn is held (%v)", round, stops, err)
			}
			time.Sleep(30 * time.Millisecond)
		}
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("at most %d stops to find the writer outside its turn", most)
}

// A process whose threads all spin: the helper process of TestStopOutsideTurnWaitsForEveryThread.
func init() {
	if os.Getenv("EFFECTFENCE_TEST_SPINNER") == "" {
		return
	}
	runtime.GOMAXPROCS(8)
	for range 8 {
		go func() {
			for n := 0; ; n++ {
				_ = n * n
			}
		}()
	}
	for n := 0; ; n++ {
		_ = n * n
	}
}

// TestStopOutsideTurnWaitsForEveryThread: SIGSTOP is delivered after kill returns, and a
// thread still running could take the ledger's lock after StopOutsideTurn looked. When it
// returns, every thread of the process must already be stopped. The process spins on eight
// threads (more than this machine's cores, so some wait to be scheduled when the signal comes).
func TestStopOutsideTurnWaitsForEveryThread(t *testing.T) {
	cmd := startHelper(t, "EFFECTFENCE_TEST_SPINNER=1")
	tasks := fmt.Sprintf("/proc/%d/task", cmd.Process.Pid)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if ents, err := os.ReadDir(tasks); err == nil && len(ents) >= 9 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the spinner never started its threads")
		}
	}
	// No ledger at this path: nothing is held, so the first stop is the one returned.
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	for round := range 20 {
		if _, err := ledgerturn.StopOutsideTurn(cmd.Process.Pid, ledger); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(tasks)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(tasks, e.Name(), "stat"))
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) == 0 || f[0] != "T" && f[0] != "t" {
				t.Fatalf("round %d: StopOutsideTurn returned with thread %s still running: %q", round, e.Name(), s)
			}
		}
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startHelper starts this test binary as the helper process that env selects (see init), and
// kills it when the test ends, stopped or not.
func startHelper(t *testing.T, env string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Wait()
	})
	return cmd
}
