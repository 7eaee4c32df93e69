package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestServeDefaultsInForce runs the real `effectfence serve` with no flags and none of the
// variables that change its defaults, as an MCP client starts it, and reads its default
// ledger file: a prepared intent's claim holds a lease of the default docs/wrap.md and
// docs/gateway.md state for --lease-secs (serve.md names the flag, not the number), and the
// committed result is kept for docs/privacy.md's default result TTL. The start line says the
// same.
func TestServeDefaultsInForce(t *testing.T) {
	t.Parallel()
	lease := docSeconds(t, "../../docs/wrap.md", "`--lease-secs`\\s+\\(([0-9]+);")
	ttl := docSeconds(t, "../../docs/privacy.md", "`EFFECTFENCE_RESULT_TTL_SECS` after it was done \\(default ([0-9]+) = 24 h\\)")

	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, effectfence(t), "serve")
	cmd.Env = append(cmd.Environ(), "GORACE=atexit_sleep_ms=0", "XDG_STATE_HOME="+state, "EFFECTFENCE_LEDGER=",
		"EFFECTFENCE_LEASE_SECS=", "EFFECTFENCE_RESULT_TTL_SECS=", "EFFECTFENCE_ON_LEASE_EXPIRY=")
	stdin, out, stderr := startPiped(t, cmd)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	exchange := func(line string) json.RawMessage {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("write: %v (stderr: %s)", err, stderr.String())
		}
		b, err := out.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read: %v (stderr: %s)", err, stderr.String())
		}
		var r struct {
			Result *struct {
				IsError           bool            `json:"isError"`
				StructuredContent json.RawMessage `json:"structuredContent"`
			} `json:"result"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Result == nil || r.Result.IsError {
			t.Fatalf("%s: answered %s (%v)", line, b, err)
		}
		return r.Result.StructuredContent
	}
	exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if _, err := io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	var p serve.PrepareResult
	if err := json.Unmarshal(exchange(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"charge:defaults","tool":"charge","args":{"amount":5}}}}`), &p); err != nil || p.Ticket == nil {
		t.Fatalf("fence_prepare: %+v %v", p, err)
	}

	// The operator's view of the default ledger file, opened while serve holds the claim.
	led, err := store.Open(ctx, store.Options{Ledger: filepath.Join(state, "effectfence", "server.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	claim, err := led.Status(ctx, "charge:defaults")
	if err != nil || claim.State != fence.StateInFlight {
		t.Fatalf("the claim in the default ledger: %+v, %v", claim, err)
	}
	if got := claim.LeaseUntil.Sub(claim.ClaimedAt); got != lease || !p.Ticket.LeaseUntil.Equal(claim.LeaseUntil) {
		t.Errorf("serve with no --lease-secs: a claim's lease is %v (claimed %v, until %v; the ticket says %v); docs/wrap.md says %v",
			got, claim.ClaimedAt, claim.LeaseUntil, p.Ticket.LeaseUntil, lease)
	}
	ticket, _ := json.Marshal(p.Ticket)
	exchange(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fence_commit","arguments":{"ticket":` + string(ticket) + `,"result":{"charge":"ch_1"}}}}`)
	rec, err := led.Status(ctx, "charge:defaults")
	if err != nil || rec.State != fence.StateDone {
		t.Fatalf("after fence_commit: %+v, %v", rec, err)
	}
	if got := rec.ExpiresAt.Sub(rec.UpdatedAt); got != ttl {
		t.Errorf("serve with no --result-ttl-secs: a result is kept %v (done %v, expires %v); docs/privacy.md says %v", got, rec.UpdatedAt, rec.ExpiresAt, ttl)
	}
	start := regexp.MustCompile(`\(lease ([^,]+), results kept ([^)]+)\)`).FindStringSubmatch(stderr.String())
	if start == nil || start[1] != lease.String() || start[2] != ttl.String() {
		t.Errorf("serve's start line %q; want lease %v, results kept %v", strings.TrimSpace(stderr.String()), lease, ttl)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exit: %v (stderr: %s)", err, stderr.String())
	}
}

// docSeconds reads a number of seconds a doc states for a default (the first group of
// pattern's only match in path).
func docSeconds(t *testing.T, path, pattern string) time.Duration {
	t.Helper()
	v := docDefault(t, path, pattern)
	d, err := time.ParseDuration(normDefault(v[0], true))
	if len(v) != 1 || err != nil {
		t.Fatalf("%s: %q, %v", path, v, err)
	}
	return d
}

// TestServeSettleRetriesAsDocumented runs the real serve with its SQLite ledger moved aside
// under it: a fence_commit retries the outcome for docs/serve.md's "up to 2 s" before it
// answers store_error with the spool file, so the answer comes no sooner (a lower bound), and
// it tells the agent when the outcome will be recorded as docs/serve.md does.
func TestServeSettleRetriesAsDocumented(t *testing.T) {
	t.Parallel()
	retry := docSeconds(t, "../../docs/serve.md", `retry\s+an outcome the ledger does not take \([^)]*\)\s+for up to ([0-9]+ s), then keep it`)
	if again := docSeconds(t, "../../docs/RELIABILITY.md", "`fence_abort` settle this way for up to ([0-9]+ s) and"); again != retry {
		t.Fatalf("docs/serve.md says %v, docs/RELIABILITY.md %v", retry, again)
	}
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	s := startServe(t, "--ledger", ledger)
	p := s.prepare(`{"intent":"charge:settle","tool":"charge_card","args":{"amount":4900}}`)
	if p.Status != serve.StatusFresh {
		t.Fatalf("prepare: %+v", p)
	}
	if err := os.Rename(ledger, ledger+".away"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	r := s.refused(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_1"}}`)
	took := time.Since(began)
	if r.Code != fence.CodeStore || r.Spooled == "" || took < retry {
		t.Fatalf("fence_commit while the ledger is away answered after %v: code %s, spooled %q; docs/serve.md says it retries for %v, then spools", took.Round(time.Millisecond), r.Code, r.Spooled, retry)
	}
	// The agent is told when the spooled outcome will be recorded: by the background recovery,
	// as often as docs/serve.md says (pkg/store TestSweepAndRecoverEveryAsDocumented holds the
	// interval itself).
	within := docSeconds(t, "../../docs/serve.md", `\(within ([0-9]+ s), or when any fence process next opens the ledger\)`)
	if want := fmt.Sprintf("(within %d s, ", int(within.Seconds())); !strings.Contains(r.Next, want) {
		t.Errorf("the spooled refusal's next does not say %q (docs/serve.md): %s", want, r.Next)
	}
}
