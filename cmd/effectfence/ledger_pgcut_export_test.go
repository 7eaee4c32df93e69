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
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerExportConnectionCut: the PostgreSQL connection of `ledger export` is terminated
// while the export is writing (its records read, its audit events not yet): the export exits
// 1 with an error on stderr that says the export is incomplete (what it wrote reads like a
// smaller ledger), never 0 with the events missing, and every line it wrote is whole.
func TestLedgerExportConnectionCut(t *testing.T) {
	raw := pgLedger(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	app := "effectfence-exportcut-" + hex.EncodeToString(b[:])
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	loc := u.String()

	// Enough records that their lines fill the pipe many times over: the export blocks in
	// writing them, its transaction open, until the test reads on.
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: loc})
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 2000)
	const n = 300
	for i := range n {
		adm, err := l.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("cut-%04d", i), Tool: "t", Args: []byte(`{"pad":"` + pad + `"}`), Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	// One audit event the export must carry after the records.
	if _, err := l.Clear(ctx, "cut-0000", "tester", "seeded"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, effectfence(t), "ledger", "export", "--ledger", loc)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
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
		t.Fatalf("export wrote no line: %v\n%s", err, errb.String())
	}

	// Cut every connection of the export and wait until the server has none left.
	admin, err := pgx.Connect(ctx, os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var cut int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) t", app).Scan(&cut); err != nil || cut == 0 {
		t.Fatalf("terminating the export's connections: %d, %v", cut, err)
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

	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitError {
		t.Fatalf("export whose connection was cut: %v (want exit 1)\nstderr: %s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "postgres") || !strings.Contains(errb.String(), "ledger export is incomplete") {
		t.Errorf("export's error does not say the export is incomplete and why:\n%s", errb.String())
	}
	all := first + string(rest)
	records, events := 0, 0
	for i, s := range strings.Split(strings.TrimSuffix(all, "\n"), "\n") {
		var line ledger.ExportLine
		if err := json.Unmarshal([]byte(s), &line); err != nil {
			t.Fatalf("line %d of the cut export is not whole (%v): %.200q", i+1, err, s)
		}
		if line.Record != nil {
			records++
		} else {
			events++
		}
	}
	if all != "" && !strings.HasSuffix(all, "\n") {
		t.Errorf("the cut export ends in a torn line: %q", all[max(0, len(all)-100):])
	}
	t.Logf("cut export: %d records, %d events, exit 1: %s", records, events, strings.TrimSpace(errb.String()))
}
