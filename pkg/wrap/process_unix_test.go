//go:build unix

package wrap_test

// The process tests that send wrap Unix signals (kill -9, SIGUSR1); the others are in
// process_test.go.

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

func TestKill9MidCallFencesUntilCleared(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	w := r.wrap("--lease-secs", "2") // the clear below waits for the lease: a short one
	go func() { _, _ = callE(w.Session, "slow", `{"ms":1500,"tag":"k9"}`) }()
	led := r.openLedger()
	intent := ""
	for deadline := time.Now().Add(10 * time.Second); intent == ""; {
		if time.Now().After(deadline) {
			t.Fatal("the call never became in flight")
		}
		_ = led.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(rec *fence.Record) bool {
				intent = rec.Intent
				return false
			})
		})
		time.Sleep(10 * time.Millisecond)
	}
	kids := childPids(w.Pid())
	if len(kids) != 1 {
		t.Fatalf("wrap has %d children, want its MCP server: %v", len(kids), kids)
	}
	if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	// The child dies with wrap (Pdeathsig), so the call it had may or may not have had its
	// effect: normally not (it was killed mid-sleep); under heavy load it may have finished
	// before wrap settled it. Either way the outcome is unknown to the ledger.
	waitFor(t, "the child to die with wrap", func() bool { return !alive(kids[0]) })
	ran := r.effectCount()
	if ran > 1 {
		t.Fatalf("the child ran the call %d times before wrap died", ran)
	}
	w2 := r.wrap()
	x := call(t, w2.Session, "slow", `{"ms":1500,"tag":"k9"}`)
	if !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` || !strings.Contains(x.text(), "NOT executed again") ||
		!strings.Contains(x.text(), "effectfence ledger clear "+intent) || !strings.Contains(x.text(), "--ledger "+r.ledger) {
		t.Fatalf("after kill -9 the call must be fenced as unknown with the operator's command: %+v", x.text())
	}
	if n := r.effectCount(); n != ran {
		t.Fatalf("the child ran %d times, want %d: the fenced retry must not run", n, ran)
	}
	rec, err := led.Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown {
		t.Fatalf("intent state %s, %v; want unknown", rec.State, err)
	}
	// The operator runs the exact command the message gave, once the claim's lease lapsed
	// (before, a process the child started could still be running the effect: refused).
	time.Sleep(time.Until(rec.LeaseUntil) + 200*time.Millisecond)
	r.runClearCommand(x.text())
	if x := call(t, w2.Session, "slow", `{"ms":10,"tag":"k9"}`); x.IsError {
		t.Fatalf("different args must run: %+v", x)
	}
	if x := call(t, w2.Session, "slow", `{"ms":1500,"tag":"k9"}`); x.IsError || x.replayed() || r.effectCount() != ran+2 {
		t.Fatalf("after clear the call must run: %+v, %d effects, want %d", x, r.effectCount(), ran+2)
	}
}

func TestStatsLineOnSIGUSR1AndExit(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	storm(t, w.Session, 3, "slow", `{"ms":200,"tag":"stats"}`)
	sinceBootLine(t, w)
	w.Close()
	lines := regexp.MustCompile(`effectfence since boot: admitted=1 .*total=3 prevented=2\n`).FindAllString(w.log.String(), -1)
	if len(lines) != 2 {
		t.Fatalf("want the counter line on SIGUSR1 and at exit:\n%s", w.log.String())
	}
}

// TestKill9MidCallOfARerunSafeToolRunsAgain: --rerun-safe is recorded on the claim, so once its
// holder is killed the next wrap takes the claim over and runs the call, where any other tool's
// claim is fenced as unknown (TestKill9MidCallFencesUntilCleared).
func TestKill9MidCallOfARerunSafeToolRunsAgain(t *testing.T) {
	t.Parallel()
	kill9ThenTakeOver(t, []string{"--rerun-safe", "slow"}, []string{"--rerun-safe", "slow"}, true)
}

// TestKill9MidCallWithReclaimRunsAgain: --on-lease-expiry reclaim treats every tool as re-run
// safe: the claims that wrap makes are recorded re-run safe (no --rerun-safe named), so the
// next wrap, started with the default policy, takes the killed holder's claim over.
func TestKill9MidCallWithReclaimRunsAgain(t *testing.T) {
	t.Parallel()
	kill9ThenTakeOver(t, []string{"--on-lease-expiry", "reclaim"}, nil, true)
}

// kill9ThenTakeOver kills a wrap (started with first) while its call of slow is in the child,
// then makes the same call through a wrap started with second, which must take the claim over
// and run the call. rerunSafe is whether the claim must be recorded re-run safe.
func kill9ThenTakeOver(t *testing.T, first, second []string, rerunSafe bool) {
	needProc(t)
	r := newRig(t)
	w := r.wrap(first...)
	const args = `{"ms":1500,"tag":"rerun"}`
	go func() { _, _ = callE(w.Session, "slow", args) }()
	led := r.openLedger()
	claim := waitForClaim(t, led)
	if claim.RerunSafe != rerunSafe {
		t.Fatalf("the claim is recorded re-run safe %v, want %v: %+v", claim.RerunSafe, rerunSafe, claim)
	}
	kids := childPids(w.Pid())
	if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	for _, k := range kids {
		waitFor(t, "the child to die with wrap", func() bool { return !alive(k) })
	}
	ran := r.effectCount()
	w2 := r.wrap(second...)
	if x := call(t, w2.Session, "slow", args); x.IsError || x.replayed() {
		t.Fatalf("a re-run-safe call whose holder was killed must run again: %+v", x.text())
	}
	if n := r.effectCount(); n != ran+1 {
		t.Fatalf("the child ran %d times, want %d", n, ran+1)
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.State != fence.StateDone {
		t.Fatalf("after the takeover: %+v %v, want done", rec, err)
	}
}

// waitForClaim waits until led holds a claim in flight, and returns it.
func waitForClaim(t *testing.T, led *store.Ledger) *fence.Record {
	t.Helper()
	var claim *fence.Record
	waitFor(t, "the call to be in flight", func() bool {
		_ = led.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(rec *fence.Record) bool {
				claim = rec
				return false
			})
		})
		return claim != nil
	})
	return claim
}

// sinceBootLine has wrap log its counters (SIGUSR1) and returns the first such line of its log.
func sinceBootLine(t *testing.T, w *wrapProc) string {
	t.Helper()
	if err := syscall.Kill(w.Pid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`effectfence since boot: .*\n`)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if line := re.FindString(w.log.String()); line != "" {
			return strings.TrimSuffix(line, "\n")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stats line after SIGUSR1: %s", w.log.String())
		}
	}
}

// A call that meets an unknown outcome, which the person settles through elicitation (*it
// happened*), is answered with the replay it then gets from the ledger, and counted once, by
// that answer: the refusal that had wrap ask is no answer of its own (before 2026-12-06 it was
// counted too, refused as failed, beside the replay: two attempts for one call).
func TestCallSettledByThePersonIsCountedOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var asked atomic.Int32
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	r.onRequest = func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
		if method == "elicitation/create" {
			asked.Add(1)
			return json.RawMessage(`{"action":"accept","content":{"outcome":"happened","reference":"checked"}}`), nil
		}
		return json.RawMessage(`{}`), nil
	}
	w := r.wrap()
	if x := call(t, w.Session, "die", `{"tag":"settled"}`); !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` {
		t.Fatalf("a call whose server died inside it: %+v; want its outcome unknown", x)
	}
	if x := call(t, w.Session, "die", `{"tag":"settled"}`); x.IsError || !x.replayed() || asked.Load() != 1 || r.effectCount() != 1 {
		t.Fatalf("the call again, the person saying it happened: %q (isError %v, replayed %v), asked %d times, %d executions; want the replay, asked once, 1 execution",
			x.text(), x.IsError, x.replayed(), asked.Load(), r.effectCount())
	}
	if got, want := sinceBootLine(t, w), "effectfence since boot: admitted=1 replayed=1 refused(stale=0 race=0 in-flight=0 failed=0 conflict=0) total=2 prevented=1"; got != want {
		t.Fatalf("counted %q, want %q", got, want)
	}
}
