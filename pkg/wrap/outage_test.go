package wrap_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
)

// cutLedger returns a PostgreSQL ledger URL, in a schema of its own dropped at the end, that
// reaches the database through a proxy that can cut it.
func cutLedger(t *testing.T) (*netcut.Proxy, string) {
	t.Helper()
	return ledgerBehind(t, netcut.New)
}

// ledgerBehind is cutLedger with the proxy newProxy makes (netcut.NewPostgres, say).
func ledgerBehind(t *testing.T, newProxy func(string) (*netcut.Proxy, error)) (*netcut.Proxy, string) {
	t.Helper()
	base := os.Getenv("EFFECTFENCE_TEST_POSTGRES")
	if base == "" {
		t.Skip("SKIP-REQUIRED: EFFECTFENCE_TEST_POSTGRES is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(target, "5432")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "effectfence_test_wrap_" + hex.EncodeToString(b[:])
	// Dropped with psql: linking a PostgreSQL driver into this test binary, which is also the
	// test's MCP child, slows the child's start enough to break the init-timeout tests.
	t.Cleanup(func() {
		psql, err := exec.LookPath("psql")
		if err != nil {
			t.Logf("schema %s left in place: no psql to drop it", schema)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, psql, base, "-c", "DROP SCHEMA IF EXISTS "+schema+" CASCADE").CombinedOutput(); err != nil {
			t.Logf("dropping schema %s: %v %s", schema, err, out)
		}
	})
	p, err := newProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("pool_max_conns", "4")
	u.RawQuery = q.Encode()

	return p, u.String()
}

// TestLedgerOutageAtCommit: wrap on PostgreSQL, the database cut for a second while a call
// finishes. Before issue 11 the commit failed, the fallback abort failed silently, the claim
// lapsed in flight and the next duplicate ran the call again. Now the outcome is retried (and
// spooled) until the ledger takes it: the call runs once and duplicates replay its result.
func TestLedgerOutageAtCommit(t *testing.T) {
	t.Parallel()
	p, ledger := cutLedger(t)

	r := newRig(t)
	r.ledger = ledger
	w := r.wrap("--lease-secs", "1")
	answer := make(chan result, 1)
	go func() {
		x, err := callE(w.Session, "slow", `{"ms":1500,"tag":"outage"}`)
		if err != nil {
			t.Error(err)
		}
		answer <- x
	}()
	time.Sleep(1200 * time.Millisecond)
	p.Cut(time.Second) // the tool finishes at ~1.5 s with the database away until ~2.2 s
	first := <-answer
	if first.IsError || !strings.Contains(first.text(), "slow done") {
		t.Fatalf("the call itself: %+v", first)
	}
	// Duplicates never run it again; once the outcome is recorded (at once, or from the spool
	// within the next Recover) they replay it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		x, err := callE(w.Session, "slow", `{"ms":1500,"tag":"outage"}`)
		if err != nil {
			t.Fatal(err)
		}
		if n := r.effectCount(); n != 1 {
			t.Fatalf("the call ran %d times across a one-second ledger outage; wrap log:\n%s", n, w.log.String())
		}
		if x.replayed() {
			if x.same() != first.same() {
				t.Fatalf("replay differs from the original answer:\n%s\n%s", x.same(), first.same())
			}
			t.Logf("wrap log:\n%s", w.log.String())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outcome was never recorded: last answer %s; wrap log:\n%s", x.text(), w.log.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestLedgerOutageAtTaskEnd: the final outcome of a task-augmented call (server-everything's
// simulate-research-query) arrives while the PostgreSQL ledger is cut. It goes through the
// same settle path as a plain call, retried until the ledger is back, so it is recorded:
// later duplicates replay the final result. Before, the task path committed once, ignored
// the failed fallback abort, and the outcome was lost with the claim left in flight.
func TestLedgerOutageAtTaskEnd(t *testing.T) {
	t.Parallel()
	p, ledger := cutLedger(t)
	bin := peer(t, "mcp-server-everything")
	r := newRig(t)
	r.ledger = ledger
	r.childCmdOverride = []string{bin}
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	// A 1 s lease: an outcome the ledger does not take within a second is spooled (and
	// logged), then drained once the ledger is back.
	w := r.wrap("--lease-secs", "1")
	ctx := context.Background()
	params := json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"ledger outage"},"task":{"ttl":300000}}`)
	res, err := w.Call(ctx, "tools/call", params)
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if json.Unmarshal(res, &created) != nil || created.Task.TaskID == "" {
		t.Fatalf("want a CreateTaskResult, got %s", res)
	}
	// The database goes away while the task runs and stays away until well after it ended.
	p.Cut(time.Hour)
	q, _ := json.Marshal(map[string]string{"taskId": created.Task.TaskID})
	deadline := time.Now().Add(90 * time.Second) // for the task, and for wrap to try to record it
	awaitTaskCompleted(t, w, q, time.Until(deadline))
	// wrap fetches the final result itself; wait until recording it failed and it was spooled.
	recordingFailed := func() bool {
		l := w.log.String()
		return strings.Contains(l, "result: the ledger did not take") || strings.Contains(l, "recording the result") || strings.Contains(l, "could not be recorded")
	}
	for !recordingFailed() {
		if time.Now().After(deadline) {
			t.Fatalf("wrap never tried to record the task's outcome during the outage; log:\n%s", w.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.Heal() // the database is back
	for {
		later, err := w.Call(ctx, "tools/call", json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"ledger outage"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(later), `"effectfence/replayed":true`) {
			if !strings.Contains(string(later), "Research Report: ledger outage") {
				t.Fatalf("the replay is not the task's final result: %s", later)
			}
			return
		}
		if time.Now().After(deadline.Add(60 * time.Second)) {
			t.Fatalf("the task's outcome was never recorded: last answer %s; wrap log:\n%s", later, w.log.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
