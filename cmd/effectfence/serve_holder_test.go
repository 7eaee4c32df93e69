package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// serveProc is a running `effectfence serve` process, spoken to over its pipes.
type serveProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *lockedBuffer
	outEnd io.Closer // the test's end of serve's stdout: closing it is a client that stops reading
	id     int
	early  map[int]servedAnswer // answers ping read past (see ping)
}

// startServe starts the real binary's serve with args, after the MCP handshake. It is killed
// when the test ends.
func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	return startServeEnv(t, nil, args...)
}

// startServeEnv is startServe with env added to serve's environment (a parallel test cannot
// set its own with t.Setenv).
func startServeEnv(t *testing.T, env []string, args ...string) *serveProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, effectfence(t), append([]string{"serve"}, args...)...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1"), env...)
	return startServeCmd(t, cmd)
}

// startServeCmd starts cmd, a serve (or a command that runs one, such as unshare), after the
// MCP handshake. It is killed when the test ends.
func startServeCmd(t *testing.T, cmd *exec.Cmd) *serveProc {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &serveProc{t: t, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), stderr: &lockedBuffer{}, outEnd: out}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, err := in.Write([]byte(serveSession())); err != nil {
		t.Fatal(err)
	}
	return s
}

// call sends one tools/call and returns its structuredContent and isError.
func (s *serveProc) call(tool, args string) (json.RawMessage, bool) {
	s.t.Helper()
	s.id++
	line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, s.id, tool, args)
	if _, err := s.in.Write([]byte(line + "\n")); err != nil {
		s.t.Fatal(err)
	}
	for {
		b, err := s.out.ReadBytes('\n')
		if err != nil {
			s.t.Fatalf("reading serve's answer to %s: %v\nstderr %s", tool, err, s.stderr.String())
		}
		var m struct {
			ID     int `json:"id"`
			Result *struct {
				IsError           bool            `json:"isError"`
				StructuredContent json.RawMessage `json:"structuredContent"`
			} `json:"result"`
		}
		if json.Unmarshal(b, &m) == nil && m.ID == s.id {
			if m.Result == nil || m.Result.StructuredContent == nil {
				s.t.Fatalf("%s: %.500s", tool, b)
			}
			return m.Result.StructuredContent, m.Result.IsError
		}
	}
}

// prepare calls fence_prepare and returns its result, failing on a refusal.
func (s *serveProc) prepare(args string) serve.PrepareResult {
	s.t.Helper()
	raw, isErr := s.call(serve.ToolPrepare, args)
	var p serve.PrepareResult
	if isErr || json.Unmarshal(raw, &p) != nil {
		s.t.Fatalf("fence_prepare %s: %s", args, raw)
	}
	return p
}

// refused calls tool and returns its refusal, failing when it is not refused.
func (s *serveProc) refused(tool, args string) serve.Refusal {
	s.t.Helper()
	raw, isErr := s.call(tool, args)
	var r serve.Refusal
	if !isErr || json.Unmarshal(raw, &r) != nil {
		s.t.Fatalf("%s %s: want a refusal, got %s", tool, args, raw)
	}
	return r
}

func (s *serveProc) kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		s.t.Fatal(err)
	}
	_ = s.cmd.Wait()
}

func ticketJSON(t *testing.T, tk *fence.Ticket) string {
	t.Helper()
	if tk == nil {
		t.Fatal("no ticket")
	}
	b, err := json.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An agent's serve process is killed (kill -9) between fence_prepare and fence_commit: the
// MCP client starts a new one. The claim, held by the dead process, is unknown at once: a
// duplicate is refused prior_failure, not run. The agent's commit through the new process
// (same ticket) heals it, and duplicates replay its result (docs/serve.md, RELIABILITY.md).
// On a SQLite file and on PostgreSQL.
func TestServeKilledHolderHealedByItsCommit(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		killedHolderHealedByItsCommit(t, filepath.Join(t.TempDir(), "ledger.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		killedHolderHealedByItsCommit(t, pgLedger(t))
	})
}

func killedHolderHealedByItsCommit(t *testing.T, ledger string) {
	const prep = `{"intent":"charge:o-1","tool":"charge_card","args":{"amount":4900}}`
	a := startServe(t, "--ledger", ledger)
	p := a.prepare(prep)
	if p.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", p)
	}
	a.kill9()

	b := startServe(t, "--ledger", ledger)
	if r := b.refused(serve.ToolPrepare, prep); r.Code != fence.CodePriorFailure || r.State != fence.StateUnknown || r.Executed {
		t.Fatalf("a duplicate after the holder was killed: %+v; want prior_failure, unknown", r)
	}
	raw, isErr := b.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_1"}}`)
	var c serve.CommitResult
	if isErr || json.Unmarshal(raw, &c) != nil || c.Cert == nil {
		t.Fatalf("the agent's late commit through a new serve process: %s", raw)
	}
	if d := b.prepare(prep); d.Status != serve.StatusAlreadyDone || d.Cert == nil || d.Cert.Hash != c.Cert.Hash {
		t.Fatalf("a duplicate after the heal: %+v; want the cert %s", d, c.Cert.Hash)
	}
}

// The same with --on-lease-expiry reclaim: the dead holder's claim is re-run safe, so the
// next attempt takes it over. The first agent's late commit, heartbeat, release and abort
// with its old ticket are each refused lease_lost, before and after the new holder commits,
// and duplicates get the new holder's result.
func TestServeReclaimedClaimRefusesTheOldTicket(t *testing.T) {
	t.Parallel()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	const prep = `{"intent":"charge:o-2","tool":"charge_card","args":{"amount":4900}}`
	a := startServe(t, "--ledger", ledger, "--on-lease-expiry", "reclaim")
	first := a.prepare(prep).Ticket
	old := ticketJSON(t, first)
	a.kill9()

	// The new process frees the dead holder's claim when it opens the ledger (Recover), or
	// takes it over at the prepare: either way a new claim, with a greater fencing token.
	b := startServe(t, "--ledger", ledger, "--on-lease-expiry", "reclaim")
	p := b.prepare(prep)
	if p.Status != serve.StatusFresh || p.Ticket == nil || p.Ticket.Token <= first.Token {
		t.Fatalf("the dead holder's re-run-safe claim: %+v; want it taken over with a greater token than %d", p.Ticket, first.Token)
	}
	stale := func(when string) {
		t.Helper()
		for _, c := range []struct{ tool, args string }{
			{serve.ToolCommit, `{"ticket":` + old + `,"result":{"charge":"ch_old"}}`},
			{serve.ToolHeartbeat, `{"ticket":` + old + `}`},
			{serve.ToolRelease, `{"ticket":` + old + `}`},
			{serve.ToolAbort, `{"ticket":` + old + `}`},
		} {
			if r := b.refused(c.tool, c.args); r.Code != fence.CodeLeaseLost {
				t.Fatalf("%s with the old ticket %s: %+v; want lease_lost", c.tool, when, r)
			}
		}
	}
	stale("while the new holder runs")
	raw, isErr := b.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_new"}}`)
	var c serve.CommitResult
	if isErr || json.Unmarshal(raw, &c) != nil || c.Cert == nil {
		t.Fatalf("the new holder's commit: %s", raw)
	}
	stale("after the new holder committed")
	d := b.prepare(prep)
	if d.Status != serve.StatusAlreadyDone || d.Cert == nil || d.Cert.Hash != c.Cert.Hash || !bytes.Contains(d.Cert.Result, []byte("ch_new")) {
		t.Fatalf("a duplicate: %+v; want the new holder's cert", d)
	}
}

// servedAnswer is one tools/call answer read from serve: its structuredContent and isError.
type servedAnswer struct {
	raw   json.RawMessage
	isErr bool
}
