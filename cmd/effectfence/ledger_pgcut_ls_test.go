package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerLsConnectionCut: `ledger ls` writes while it reads (the table's second pass, the
// JSON record by record), so a PostgreSQL connection terminated while it writes leaves part
// of a listing on stdout. ls then exits 1 saying the listing is incomplete and why, never 0:
// the table has no bottom rule and the JSON document does not decode.
func TestLedgerLsConnectionCut(t *testing.T) {
	raw := pgLedger(t)
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: raw})
	if err != nil {
		t.Fatal(err)
	}
	// Long ids fill the pipe and ls's buffer many times over, so ls blocks in writing, its
	// transaction open, until the test reads on. With 600 rows of a kilobyte, ls once listed
	// them all and exited 0 under CI's load though its backend was terminated: the rest had
	// reached ls before the cut. 2000 rows with long reasons (about 18 MB from the server) are
	// more than can be on the way between the server and ls.
	long, reason := strings.Repeat("x", 1000), strings.Repeat("r", 8000)
	err = l.Store().Update(ctx, func(tx fence.Tx) error {
		now := tx.Now()
		for i := range 2000 {
			if err := tx.Put(&fence.Record{Intent: fmt.Sprintf("cut-%04d-%s", i, long), State: fence.StateFailed, Tool: "t", Args: []byte(`{}`), UpdatedAt: now, Reason: reason}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, jsonOut := range []bool{false, true} {
		var b [4]byte
		_, _ = rand.Read(b[:])
		app := "effectfence-lscut-" + hex.EncodeToString(b[:])
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		args := []string{"ledger", "ls", "--ledger", u.String()}
		if jsonOut {
			args = append(args, "--json")
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		cmd := exec.CommandContext(ctx, effectfence(t), args...)
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1")
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(out)
		first, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("ls wrote no line: %v\n%s", err, errb.String())
		}

		admin, err := pgx.Connect(ctx, os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
		if err != nil {
			t.Fatal(err)
		}
		var cut int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) t", app).Scan(&cut); err != nil || cut == 0 {
			t.Fatalf("terminating the connections of ls: %d, %v", cut, err)
		}
		for {
			var left int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond) // polling the server's own view until the backends are gone
		}
		admin.Close(ctx)

		rest, err := io.ReadAll(rd)
		if err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitError {
			t.Fatalf("ls %q whose connection was cut: %v (want exit 1)\nstderr: %s", args[4:], err, errb.String())
		}
		if !strings.Contains(errb.String(), "ledger ls is incomplete") || !strings.Contains(errb.String(), "postgres") {
			t.Errorf("ls %q: the error does not say the listing is incomplete and why:\n%s", args[4:], errb.String())
		}
		// A read was cut: nothing "did not commit" (the store's words for a write).
		if !strings.Contains(errb.String(), "of a read; it changed nothing") || strings.Contains(errb.String(), "did not commit") {
			t.Errorf("ls %q: the cause does not say a read was cut:\n%s", args[4:], errb.String())
		}
		all := first + string(rest)
		if jsonOut {
			var doc map[string]any
			if json.Unmarshal([]byte(all), &doc) == nil {
				t.Errorf("ls --json cut short wrote a whole document (%d bytes)", len(all))
			}
		} else if strings.Contains(all, "└") || strings.Count(all, "cut-") >= 2000 {
			t.Errorf("ls cut short wrote a whole table (%d bytes)", len(all))
		}
		t.Logf("ls %q cut: %d bytes, exit 1: %s", args[4:], len(all), strings.TrimSpace(errb.String()))
	}
}
