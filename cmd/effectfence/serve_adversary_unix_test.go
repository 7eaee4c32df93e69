//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/ledgerturn"
	"github.com/effectfence/effectfence/internal/sqlitelock"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// docs/serve.md and SPEC §3: with --on-lease-expiry reclaim, a claim is taken over once its
// serve process is gone or out of sight, but "a claim of a serve process still running on this
// host is never taken over, since its agent may be running the effect". The holder's serve
// process is stopped (SIGSTOP) past its lease while another serve process on the same ledger,
// also reclaiming, is asked for the intent: it must not be told fresh (that would be a second
// execution while the first may still run). It is refused prior_failure (unknown); after
// SIGCONT the holder's commit heals the intent and the other process replays its result.
func TestServeReclaimNeverTakesOverAStoppedHolder(t *testing.T) {
	t.Parallel()
	onLedgers(t, reclaimNeverTakesOverAStoppedHolder)
}

// onLedgers runs test on a SQLite file and on a PostgreSQL schema of its own (skipped without
// EFFECTFENCE_TEST_POSTGRES), in parallel.
func onLedgers(t *testing.T, test func(t *testing.T, ledger string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); test(t, filepath.Join(t.TempDir(), "ledger.db")) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); test(t, pgLedger(t)) })
}

func reclaimNeverTakesOverAStoppedHolder(t *testing.T, ledger string) {
	const prep = `{"intent":"payout:p-7","tool":"send_payout","args":{"amount":120}}`
	a := startServe(t, "--ledger", ledger, "--lease-secs", "1", "--on-lease-expiry", "reclaim")
	b := startServe(t, "--ledger", ledger, "--lease-secs", "1", "--on-lease-expiry", "reclaim")
	p := a.prepare(prep)
	if p.Status != serve.StatusFresh {
		t.Fatalf("the holder's prepare: %+v", p)
	}
	// Stopped inside its call, not inside a transaction of its own (ledgerturn.StopOutsideTurn; a
	// PostgreSQL ledger has no file to look at, and the serve holds no transaction open
	// between its calls).
	if _, err := ledgerturn.StopOutsideTurn(a.cmd.Process.Pid, ledger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	// The lease is wall-clock time: there is no event to await but its end.
	for !time.Now().After(p.Ticket.LeaseUntil.Add(200 * time.Millisecond)) {
		time.Sleep(50 * time.Millisecond)
	}

	for i := range 3 { // asked again, it stays refused: the first refusal changed nothing
		raw, isErr := b.call(serve.ToolPrepare, prep)
		var r serve.Refusal
		if !isErr || json.Unmarshal(raw, &r) != nil {
			t.Fatalf("attempt %d on a stopped holder's lapsed claim (reclaim): %s; want a refusal, never fresh", i, raw)
		}
		if r.Code != fence.CodePriorFailure || r.State != fence.StateUnknown || r.Executed {
			t.Fatalf("attempt %d on a stopped holder's lapsed claim: %+v; want prior_failure, unknown", i, r)
		}
	}

	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	raw, isErr := a.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"payout":"po_7"}}`)
	var c serve.CommitResult
	if isErr || json.Unmarshal(raw, &c) != nil || c.Cert == nil {
		t.Fatalf("the resumed holder's commit: %s", raw)
	}
	if d := b.prepare(prep); d.Status != serve.StatusAlreadyDone || d.Cert == nil || d.Cert.Hash != c.Cert.Hash {
		t.Fatalf("a duplicate after the heal: %+v; want the holder's cert %s", d, c.Cert.Hash)
	}
}

// A client that hangs up mid-call (closes the pipe it reads serve's answers from, and its end
// of serve's stdin) while commits are in flight: docs/DECISIONS-serve.md says the outcome calls
// run detached from the caller's cancellation, "an agent that hangs up after running an effect
// must not leave its outcome half-recorded", and serve.go catches SIGPIPE so a closed stdout
// cannot kill it mid-commit. Every commit sent before the hang-up is recorded, and serve exits
// on its own (not by a signal). A fence_prepare admitted in the same moment, whose answer (the
// ticket) could not be written at all, is released: nobody received its ticket, so nothing
// can have run, and the intent must not be left to become unknown, fenced for an operator.
func TestServeClientHangsUpMidCall(t *testing.T) {
	t.Parallel()
	t.Run("ledger free", func(t *testing.T) { t.Parallel(); clientHangsUpMidCall(t, false) })
	// Another process holds the SQLite file's write lock until serve has exited: the
	// outcomes are in flight, waiting on the ledger, when the client hangs up. serve must
	// neither exit before they are settled nor drop them: they wait in the spool, which the
	// next process drains.
	t.Run("ledger locked", func(t *testing.T) { t.Parallel(); clientHangsUpMidCall(t, true) })
}

func clientHangsUpMidCall(t *testing.T, locked bool) {
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	prep := func(i int) string {
		return fmt.Sprintf(`{"intent":"charge:hup-%d","tool":"charge_card","args":{"amount":%d}}`, i, 100+i)
	}
	const n = 8
	a := startServe(t, "--ledger", ledger)
	tickets := make([]string, n)
	for i := range n {
		p := a.prepare(prep(i))
		if p.Status != serve.StatusFresh {
			t.Fatalf("prepare %d: %+v", i, p)
		}
		tickets[i] = ticketJSON(t, p.Ticket)
	}
	unlock := func() {}
	if locked {
		unlock = sqlitelock.Hold(t, ledger)
	}
	// The client stops reading, then its last requests reach serve's stdin, then it is gone.
	if err := a.outEnd.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		a.send(serve.ToolCommit, `{"ticket":`+tickets[i]+`,"result":{"charge":"ch_`+fmt.Sprint(i)+`"}}`)
	}
	a.send(serve.ToolPrepare, prep(n))
	if err := a.in.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	if locked {
		// Each commit waits for the lock up to its 2 s bound, fails, and is kept in the
		// spool: once all n are there, the lock is given back. (The prepare fails the
		// same way, store_error: nothing is claimed.)
		spool := ledger + ".spool"
		deadline := time.Now().Add(3 * time.Minute)
		for {
			files, _ := filepath.Glob(filepath.Join(spool, "*.json"))
			if len(files) >= n {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("serve exited (%v) with %d of its %d commits in the spool while the ledger was locked: the rest are lost\nstderr %s", err, len(files), n, a.stderr.String())
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d commits in the spool after 3 minutes\nstderr %s", len(files), n, a.stderr.String())
			}
		}
		unlock()
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("serve died of %v after its client hung up\nstderr %s", ws.Signal(), a.stderr.String())
			}
		}
	case <-time.After(90 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
		t.Fatalf("serve did not exit within 90 s of its client hanging up (and the ledger being free)\nstderr %s", a.stderr.String())
	}
	unlock()
	if strings.Contains(a.stderr.String(), "panic") {
		t.Fatalf("serve's stderr mentions a panic:\n%s", a.stderr.String())
	}

	b := startServe(t, "--ledger", ledger)
	for i := range n {
		d := b.prepare(prep(i))
		if d.Status != serve.StatusAlreadyDone || d.Cert == nil || !strings.Contains(string(d.Cert.Result), fmt.Sprintf("ch_%d", i)) {
			t.Fatalf("intent %d, committed as its client hung up: %+v; want already_done with ch_%d", i, d, i)
		}
	}
	raw, isErr := b.call(serve.ToolPrepare, prep(n))
	var p serve.PrepareResult
	if isErr || json.Unmarshal(raw, &p) != nil || p.Status != serve.StatusFresh {
		t.Fatalf("an intent admitted while its client hung up, its ticket never delivered: %s; want fresh (the claim released: nothing ran)\nfirst serve's stderr %s", raw, a.stderr.String())
	}
}

// Two serve processes share one ledger (a SQLite file; a PostgreSQL schema); one is killed (kill -9) while eight of its
// commits are in flight, in whatever state their transactions were. The other keeps serving
// its own claims undisturbed. Each of the dead process's intents is then either done (its
// commit landed) or unknown (its holder is gone: refused prior_failure, never fresh), and its
// agent's commit retried through the live process with the same ticket and result is answered
// with a cert every time, the same one duplicates then replay: an outcome is never lost or
// doubled across kill -9 (SPEC §4, docs/serve.md).
func TestServeKilledMidCommitBesideALiveServe(t *testing.T) {
	t.Parallel()
	onLedgers(t, killedMidCommitBesideALiveServe)
}

func killedMidCommitBesideALiveServe(t *testing.T, ledger string) {
	const n = 8
	prep := func(who string, i int) string {
		return fmt.Sprintf(`{"intent":"refund:%s-%d","tool":"refund","args":{"amount":%d}}`, who, i, 10+i)
	}
	result := func(who string, i int) string { return fmt.Sprintf(`{"refund":"re_%s_%d"}`, who, i) }
	a := startServe(t, "--ledger", ledger)
	b := startServe(t, "--ledger", ledger)
	ta, tb := make([]string, n), make([]string, n)
	for i := range n {
		ta[i] = ticketJSON(t, a.prepare(prep("a", i)).Ticket)
		tb[i] = ticketJSON(t, b.prepare(prep("b", i)).Ticket)
	}
	for i := range n {
		a.send(serve.ToolCommit, `{"ticket":`+ta[i]+`,"result":`+result("a", i)+`}`)
	}
	a.kill9()

	for i := range n {
		raw, isErr := b.call(serve.ToolCommit, `{"ticket":`+tb[i]+`,"result":`+result("b", i)+`}`)
		if isErr {
			t.Fatalf("the live process's own commit %d after the other was killed: %s", i, raw)
		}
	}
	for i := range n {
		raw, isErr := b.call(serve.ToolPrepare, prep("a", i))
		if isErr {
			var r serve.Refusal
			if json.Unmarshal(raw, &r) != nil || r.Code != fence.CodePriorFailure || r.State != fence.StateUnknown {
				t.Fatalf("intent a-%d of the killed process: %s; want done, or prior_failure unknown", i, raw)
			}
		} else {
			var p serve.PrepareResult
			if json.Unmarshal(raw, &p) != nil || p.Status != serve.StatusAlreadyDone || p.Cert == nil || !jsonEqual(t, p.Cert.Result, []byte(result("a", i))) {
				t.Fatalf("intent a-%d of the killed process: %s; want its committed result, never fresh", i, raw)
			}
		}
		raw, isErr = b.call(serve.ToolCommit, `{"ticket":`+ta[i]+`,"result":`+result("a", i)+`}`)
		var c serve.CommitResult
		if isErr || json.Unmarshal(raw, &c) != nil || c.Cert == nil {
			t.Fatalf("the killed process's commit %d retried through the live one: %s", i, raw)
		}
		if d := b.prepare(prep("a", i)); d.Status != serve.StatusAlreadyDone || d.Cert == nil || d.Cert.Hash != c.Cert.Hash {
			t.Fatalf("a duplicate of a-%d: %+v; want cert %s", i, d, c.Cert.Hash)
		}
		if d := b.prepare(prep("b", i)); d.Status != serve.StatusAlreadyDone || d.Cert == nil || !jsonEqual(t, d.Cert.Result, []byte(result("b", i))) {
			t.Fatalf("a duplicate of b-%d: %+v", i, d)
		}
	}
	verify := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "verify", "--ledger", ledger)
	if verify.code != 0 {
		t.Fatalf("ledger verify after kill -9: exit %d\n%s%s", verify.code, verify.stdout, verify.stderr)
	}
}

// An agent's serve process is killed (kill -9) and the agent goes on through another serve
// process on the same ledger; still running the effect, it renews its lease through that one (fence_heartbeat:
// "Keep running the effect"). The claim's holder is alive again, through that process: another
// agent's attempt through a third serve process must be refused intent_in_flight, never
// admitted (with --on-lease-expiry reclaim that would run the effect a second time while the
// first runs) nor fenced as if the holder were gone; the holder's commit then lands and is
// replayed.
func TestServeHeartbeatThroughANewProcessKeepsTheClaim(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"fence", "reclaim"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			onLedgers(t, func(t *testing.T, ledger string) { heartbeatThroughANewProcess(t, ledger, policy) })
		})
	}
}

func heartbeatThroughANewProcess(t *testing.T, ledger, policy string) {
	const prep = `{"intent":"deploy:web-42","tool":"kubectl_apply","args":{"rev":42}}`
	args := []string{"--ledger", ledger, "--on-lease-expiry", policy}
	a := startServe(t, args...)
	// Started before a dies: a process opening the ledger after it frees (reclaim) or
	// fences (fence) a dead holder's claim at once, and a fenced claim's heartbeat
	// heals it the same way.
	b := startServe(t, args...)
	p := a.prepare(prep)
	if p.Status != serve.StatusFresh {
		t.Fatalf("the first prepare: %+v", p)
	}
	a.kill9()

	raw, isErr := b.call(serve.ToolHeartbeat, `{"ticket":`+ticketJSON(t, p.Ticket)+`}`)
	var hb serve.HeartbeatResult
	if isErr && policy == "reclaim" {
		// b may have freed the dead holder's re-run-safe claim first (its background
		// recovery): then the holder is told lease_lost, and stops.
		var r serve.Refusal
		if json.Unmarshal(raw, &r) != nil || r.Code != fence.CodeLeaseLost {
			t.Fatalf("the holder's heartbeat through another serve process: %s", raw)
		}
		t.Skip("the dead holder's claim was freed before its heartbeat (lease_lost): the case this test is about did not arise")
	}
	if isErr || json.Unmarshal(raw, &hb) != nil || hb.Ticket.Token != p.Ticket.Token {
		t.Fatalf("the holder's heartbeat through another serve process: %s", raw)
	}
	c := startServe(t, args...)
	for i := range 2 {
		raw, isErr = c.call(serve.ToolPrepare, prep)
		var r serve.Refusal
		if !isErr || json.Unmarshal(raw, &r) != nil || r.Code != fence.CodeInFlight {
			t.Fatalf("attempt %d while the holder heartbeats through a live process: %s; want intent_in_flight", i, raw)
		}
	}
	raw, isErr = b.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, &hb.Ticket)+`,"result":{"applied":42}}`)
	var cm serve.CommitResult
	if isErr || json.Unmarshal(raw, &cm) != nil || cm.Cert == nil {
		t.Fatalf("the holder's commit: %s", raw)
	}
	if d := c.prepare(prep); d.Status != serve.StatusAlreadyDone || d.Cert == nil || d.Cert.Hash != cm.Cert.Hash {
		t.Fatalf("a duplicate after the commit: %+v", d)
	}
}

// The same hang-up through the real MCP client: the TypeScript SDK's client sends eight
// commits and closes its transport at once (it ends serve's stdin, then escalates to SIGTERM
// and SIGKILL), answers unread. A new client on a new serve process over the same ledger is
// replayed each committed result: no outcome sent before the hang-up is lost.
func TestServeSDKClientClosesMidCommit(t *testing.T) {
	t.Parallel()
	peers := peersDir(t)
	bin := effectfence(t)
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", filepath.Join("testdata", "serve_hangup.mjs"))
	node.Env = append(os.Environ(), "PEERS="+peers, "EF_BIN="+bin, "EF_LEDGER="+ledger, "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	node.Stdout, node.Stderr = &stdout, &stderr
	if err := node.Run(); err != nil {
		t.Fatalf("node client: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep struct {
		Commits []json.RawMessage `json:"commits"`
		After   []struct {
			IsError bool                `json:"isError"`
			JSON    serve.PrepareResult `json:"json"`
		} `json:"after"`
		Exit json.RawMessage `json:"exit"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("client report: %v\n%s", err, stdout.String())
	}
	t.Logf("the first serve process ended %s; the commits as the closing client saw them: %s", rep.Exit, rep.Commits)
	if len(rep.After) != 8 {
		t.Fatalf("report: %s", stdout.String())
	}
	for i, a := range rep.After {
		p := a.JSON
		if a.IsError || p.Status != serve.StatusAlreadyDone || p.Cert == nil || !jsonEqual(t, p.Cert.Result, []byte(fmt.Sprintf(`{"charge":"ch_%d"}`, i))) {
			t.Errorf("intent %d, committed as the SDK client closed: %+v; want already_done with ch_%d\nstderr:\n%s", i, a, i, stderr.String())
		}
	}
}

// While another process holds the SQLite ledger's write lock (another SQLite client inside
// its transaction, a writer stopped there), an outcome serve cannot record is answered within
// its 2 s bound, store_error with spooled, not after the store's busy timeout (30 s, for the
// first; as much again for each queued behind it): a client whose request times out sooner
// (60 s is common) would otherwise get no answer. Two commits at once, so one waits behind
// the other. Once the lock is free, a new process records them from the spool: duplicates
// receive the agents' results.
func TestServeOutcomeWhileTheLedgerIsLockedIsSpooledWithinItsBound(t *testing.T) {
	t.Parallel()
	onLedgers(t, outcomeWhileTheLedgerIsLocked)
}

// lockAnyLedger holds what a commit to the ledger needs, as another process would: a SQLite
// file's write lock; a PostgreSQL schema's records table (a transaction holding it locked).
func lockAnyLedger(t *testing.T, ledger string) (unlock func()) {
	t.Helper()
	if !strings.HasPrefix(ledger, "postgres") {
		return sqlitelock.Hold(t, ledger)
	}
	ctx := context.Background()
	conn, err := connectLedger(ctx, ledger)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN; LOCK TABLE effectfence_records IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			_, _ = conn.Exec(ctx, "ROLLBACK")
			_ = conn.Close(ctx)
		})
	}
	t.Cleanup(unlock)
	return unlock
}

func outcomeWhileTheLedgerIsLocked(t *testing.T, ledger string) {
	prep := func(i int) string {
		return fmt.Sprintf(`{"intent":"charge:locked-%d","tool":"charge_card","args":{"amount":%d}}`, i, 100+i)
	}
	a := startServe(t, "--ledger", ledger)
	tickets := make([]string, 2)
	for i := range tickets {
		tickets[i] = ticketJSON(t, a.prepare(prep(i)).Ticket)
	}
	unlock := lockAnyLedger(t, ledger)
	ids := map[int]int{}
	for i := range tickets {
		ids[a.send(serve.ToolCommit, `{"ticket":`+tickets[i]+`,"result":{"charge":"ch_`+fmt.Sprint(i)+`"}}`)] = i
	}
	answers := make(chan map[int]json.RawMessage, 1)
	go func() {
		got := map[int]json.RawMessage{}
		for len(got) < len(ids) {
			b, err := a.out.ReadBytes('\n')
			if err != nil {
				break
			}
			var m struct {
				ID     int `json:"id"`
				Result *struct {
					StructuredContent json.RawMessage `json:"structuredContent"`
				} `json:"result"`
			}
			if json.Unmarshal(b, &m) == nil && m.Result != nil {
				if _, ok := ids[m.ID]; ok {
					got[m.ID] = m.Result.StructuredContent
				}
			}
		}
		answers <- got
	}()
	var got map[int]json.RawMessage
	select {
	case got = <-answers:
	case <-time.After(20 * time.Second):
		t.Fatalf("no answer to the commits 20 s after they were sent while another process held the ledger's lock (the bound is 2 s; the busy timeout 30 s)\nstderr %s", a.stderr.String())
	}
	for id, i := range ids {
		var r serve.Refusal
		if json.Unmarshal(got[id], &r) != nil || r.Code != fence.CodeStore || r.Spooled == "" || !r.Executed {
			t.Fatalf("commit %d while the ledger was locked: %s; want store_error, executed, spooled", i, got[id])
		}
	}
	unlock()
	a.kill9()
	b := startServe(t, "--ledger", ledger)
	for i := range tickets {
		d := b.prepare(prep(i))
		if d.Status != serve.StatusAlreadyDone || d.Cert == nil || !strings.Contains(string(d.Cert.Result), fmt.Sprintf("ch_%d", i)) {
			t.Fatalf("a duplicate of intent %d, committed while the ledger was locked: %+v; want already_done with ch_%d", i, d, i)
		}
	}
}

// docs/serve.md: a fence_prepare that meets a SQLite ledger whose write lock another process
// holds waits for it up to the store's busy timeout (30 s), then answers store_error and
// claims nothing; asked again once the lock is given back, the intent is admitted. On a
// PostgreSQL ledger, where no busy timeout bounds the wait for another transaction's lock
// (or for a database that stopped answering), the prepare waited as long as the lock was
// held: here until startServe's two minutes killed the process, its call never answered,
// and neither the agent's cancellation nor the end of its input could end it.
func TestServePrepareWhileTheLedgerIsLockedClaimsNothing(t *testing.T) {
	t.Parallel()
	onLedgers(t, prepareWhileTheLedgerIsLocked)
}

func prepareWhileTheLedgerIsLocked(t *testing.T, ledger string) {
	const prep = `{"intent":"charge:locked-prepare","tool":"charge","args":{"amount":5}}`
	a := startServe(t, "--ledger", ledger)
	if p := a.prepare(`{"intent":"warm","tool":"t"}`); p.Status != serve.StatusFresh { // the ledger exists
		t.Fatalf("warm-up prepare: %+v", p)
	}
	unlock := lockAnyLedger(t, ledger)
	raw, isErr := a.call(serve.ToolPrepare, prep)
	var r serve.Refusal
	if !isErr || json.Unmarshal(raw, &r) != nil || r.Code != fence.CodeStore {
		t.Fatalf("fence_prepare with the ledger locked past the busy timeout: %s; want store_error", raw)
	}
	unlock()
	if p := a.prepare(prep); p.Status != serve.StatusFresh {
		t.Fatalf("fence_prepare once the lock was given back: %+v; want fresh (nothing was claimed before)", p)
	}
}
