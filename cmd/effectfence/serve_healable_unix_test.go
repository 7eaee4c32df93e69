//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/ledgerturn"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServeRefusalOfAClaimThatCanStillHealSaysSo: a duplicate meets an intent that went
// unknown while the agent holding its ticket can still report the outcome (docs/serve.md: the
// holder's own late fence_commit heals it): its serve process killed with the lease running,
// or stopped (SIGSTOP) past its lease. The refusal told the duplicate "do not retry" and to
// have an operator run the clear command now; run as told, the clear was refused (exit 1,
// not_fenced: the lease runs, or the holder's process does), and once the holder committed,
// only a retry, which it had been told not to send, received the result. The refusal must
// give the claim's lease_until, say that the clear is refused until then (or while the
// holder's process runs), and tell the agent to call fence_prepare again later to receive the
// outcome; and so it is: the pasted clear is refused, and the retry after the holder's late
// commit replays its cert.
func TestServeRefusalOfAClaimThatCanStillHealSaysSo(t *testing.T) {
	t.Parallel()
	t.Run("killed/sqlite", func(t *testing.T) {
		t.Parallel()
		healableAfterKill(t, filepath.Join(t.TempDir(), "ledger.db"))
	})
	t.Run("killed/postgres", func(t *testing.T) {
		t.Parallel()
		healableAfterKill(t, pgLedger(t))
	})
	t.Run("killed/postgres-clock-behind", func(t *testing.T) {
		// The lease runs by the database's clock, a day behind this host's: by the host's it
		// lapsed long ago, and the refusal left out when the clear goes through (before
		// 2026-12-07), while clear, judging by the database's, refused it.
		t.Parallel()
		healableAfterKill(t, pgLedgerWithClock(t, -24*time.Hour))
	})
	t.Run("stopped/sqlite", func(t *testing.T) {
		t.Parallel()
		healableWhileStopped(t, filepath.Join(t.TempDir(), "ledger.db"))
	})
}

const healPrep = `{"intent":"charge:o-heal","tool":"charge_card","args":{"amount":4900}}`

func healableAfterKill(t *testing.T, ledger string) {
	a := startServe(t, "--ledger", ledger)
	p := a.prepare(healPrep)
	if p.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", p)
	}
	a.kill9()

	b := startServe(t, "--ledger", ledger)
	r := b.refused(serve.ToolPrepare, healPrep)
	checkHealableRefusal(t, r, p.Ticket)
	if lapse := p.Ticket.LeaseUntil.UTC().Format(time.RFC3339); !strings.Contains(r.Next, lapse) {
		t.Errorf("next: %s\nwant it to say the clear is refused until the claim's lease lapses, %s", r.Next, lapse)
	}
	if out, code := runPastedClear(t, r.Next); code != 1 || !strings.Contains(out, "not_fenced") || !strings.Contains(out, "lease of claim") {
		t.Errorf("the clear the refusal names, run now: exit %d\n%s\nwant it refused while the lease runs, as the refusal says", code, out)
	}
	healAndReplay(t, b, b, p.Ticket)
}

func healableWhileStopped(t *testing.T, ledger string) {
	a := startServe(t, "--ledger", ledger, "--lease-secs", "2")
	b := startServe(t, "--ledger", ledger, "--lease-secs", "2")
	p := a.prepare(healPrep)
	if p.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", p)
	}
	if _, err := ledgerturn.StopOutsideTurn(a.cmd.Process.Pid, ledger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	// The wait ends once the stopped holder's lease lapses: no clock to guess.
	var prep map[string]any
	if err := json.Unmarshal([]byte(healPrep), &prep); err != nil {
		t.Fatal(err)
	}
	prep["wait_secs"] = 30
	waiting, _ := json.Marshal(prep)
	r := b.refused(serve.ToolPrepare, string(waiting))
	checkHealableRefusal(t, r, p.Ticket)
	if !strings.Contains(r.Next, "still runs on this host") {
		t.Errorf("next: %s\nwant it to say the clear is refused while the process holding the claim still runs", r.Next)
	}
	if out, code := runPastedClear(t, r.Next); code != 1 || !strings.Contains(out, "not_fenced") || !strings.Contains(out, "still runs on this host") {
		t.Errorf("the clear the refusal names, run now: exit %d\n%s\nwant it refused while the stopped holder runs, as the refusal says", code, out)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	healAndReplay(t, a, b, p.Ticket)
}

// checkHealableRefusal checks the refusal of a duplicate of the claim of ticket tk, which can
// still heal.
func checkHealableRefusal(t *testing.T, r serve.Refusal, tk *fence.Ticket) {
	t.Helper()
	if r.Code != fence.CodePriorFailure || r.State != fence.StateUnknown || r.Executed {
		t.Fatalf("the duplicate: %+v; want prior_failure, unknown, not executed", r)
	}
	if r.LeaseUntil == nil || !r.LeaseUntil.Equal(tk.LeaseUntil) {
		t.Errorf("lease_until %v; want the claim's, %s", r.LeaseUntil, tk.LeaseUntil)
	}
	if !strings.Contains(r.Next, "Call "+serve.ToolPrepare+" again later") || strings.Contains(r.Next, "do not retry") {
		t.Errorf("next: %s\nwant it to tell the agent to call %s again later (the holder's late commit is replayed to a retry), not to never retry", r.Next, serve.ToolPrepare)
	}
}

// runPastedClear runs the clear command next names, as an operator pastes it into a shell, and
// returns its output and exit status.
func runPastedClear(t *testing.T, next string) (string, int) {
	t.Helper()
	_, command, ok := strings.Cut(next, "run `")
	command, _, _ = strings.Cut(command, "`")
	if !ok || !strings.HasPrefix(command, "effectfence ledger clear ") {
		t.Fatalf("next names no clear command: %s", next)
	}
	sh := exec.Command("sh", "-c", command)
	sh.Env = append(os.Environ(), "NO_COLOR=1", "GORACE=atexit_sleep_ms=0", "PATH="+filepath.Dir(effectfence(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := sh.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("%s: %v\n%s", command, err, out)
	return "", 0
}

// healAndReplay commits the claim of tk through holder, late, and checks that a retry of the
// duplicate through dup replays its cert.
func healAndReplay(t *testing.T, holder, dup *serveProc, tk *fence.Ticket) {
	t.Helper()
	raw, isErr := holder.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, tk)+`,"result":{"charge":"ch_heal"}}`)
	var c serve.CommitResult
	if isErr || json.Unmarshal(raw, &c) != nil || c.Cert == nil {
		t.Fatalf("the holder's late commit: %s", raw)
	}
	if d := dup.prepare(healPrep); d.Status != serve.StatusAlreadyDone || d.Cert == nil || d.Cert.Hash != c.Cert.Hash {
		t.Fatalf("the duplicate's retry after the holder's commit: %+v; want the cert %s", d, c.Cert.Hash)
	}
}
