//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// send writes one tools/call without reading its answer and returns its id.
func (s *serveProc) send(tool, args string) int {
	s.t.Helper()
	s.id++
	line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, s.id, tool, args)
	if _, err := s.in.Write([]byte(line + "\n")); err != nil {
		s.t.Fatal(err)
	}
	return s.id
}

// ping sends a ping and reads until its answer, keeping the calls' answers it reads on the
// way for rest. serve reads its input in order and hands each tools/call to its lane before
// it reads the next line, so once the ping is answered every call sent before it has started.
func (s *serveProc) ping() {
	s.t.Helper()
	s.id++
	if _, err := fmt.Fprintf(s.in, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", s.id); err != nil {
		s.t.Fatal(err)
	}
	for {
		b, err := s.out.ReadBytes('\n')
		if err != nil {
			s.t.Fatalf("reading serve's answer to ping: %v\nstderr %s", err, s.stderr.String())
		}
		if id, _ := s.keep(b); id == s.id {
			return
		}
	}
}

// keep records b in s.early when it answers a tools/call, and returns its id.
func (s *serveProc) keep(b []byte) (int, *servedAnswer) {
	var m struct {
		ID     int `json:"id"`
		Result *struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"result"`
	}
	if json.Unmarshal(b, &m) != nil {
		return 0, nil
	}
	if m.Result == nil {
		return m.ID, nil
	}
	a := servedAnswer{m.Result.StructuredContent, m.Result.IsError}
	if s.early == nil {
		s.early = map[int]servedAnswer{}
	}
	s.early[m.ID] = a
	return m.ID, &a
}

// rest reads serve's answers until it closes stdout (killing it if that takes over 30 s)
// and returns each call's structuredContent and isError by id.
func (s *serveProc) rest() map[int]servedAnswer {
	s.t.Helper()
	stuck := time.AfterFunc(30*time.Second, func() { _ = s.cmd.Process.Kill() })
	defer stuck.Stop()
	for {
		b, err := s.out.ReadBytes('\n')
		if err != nil {
			got := s.early
			s.early = nil
			return got
		}
		s.keep(b)
	}
}

// exit waits for the process and returns its exit status (-1 if a signal ended it).
func (s *serveProc) exit(within time.Duration) int {
	s.t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			s.t.Fatalf("waiting for serve: %v", err)
		}
		return 0
	case <-time.After(within):
		_ = s.cmd.Process.Kill()
		s.t.Fatalf("serve did not exit within %s of the stop signal\nstderr %s", within, s.stderr.String())
		return 0
	}
}

// TestServeStopEndsWaitsAndFinishesSettlingCalls is docs/serve.md's "SIGINT or SIGTERM stops
// the server (waits end, settling calls finish); a second one exits at once", on the real
// binary. One serve process (S) has a fence_prepare waiting (wait_secs 60) on a claim another
// serve process holds, and a fence_commit in flight: the ledger file is moved aside, so the
// commit is being retried. SIGTERM: the waiter is answered at once with a refusal that says
// nothing ran and not to run it (the holder is alive); the commit finishes once the ledger is
// back (or is spooled) and is answered, S exits 0, and a duplicate in a new process receives
// the committed result. A second SIGTERM while a commit is being retried exits at once (128+15), and a
// duplicate afterwards is never told to run the effect.
func TestServeStopEndsWaitsAndFinishesSettlingCalls(t *testing.T) {
	t.Parallel()
	const held = `{"intent":"charge:o-7","tool":"charge_card","args":{"amount":700}}`
	const mine = `{"intent":"charge:o-8","tool":"charge_card","args":{"amount":800}}`

	t.Run("first signal", func(t *testing.T) {
		t.Parallel()
		ledger := filepath.Join(t.TempDir(), "ledger.db")
		h := startServe(t, "--ledger", ledger)
		if p := h.prepare(held); p.Status != serve.StatusFresh {
			t.Fatalf("the holder's prepare: %+v", p)
		}
		s := startServe(t, "--ledger", ledger)
		p := s.prepare(mine)
		if p.Status != serve.StatusFresh {
			t.Fatalf("S's prepare: %+v", p)
		}
		waiter := s.send(serve.ToolPrepare, `{"intent":"charge:o-7","tool":"charge_card","args":{"amount":700},"wait_secs":60}`)
		s.ping() // the waiter is waiting
		if err := os.Rename(ledger, ledger+".away"); err != nil {
			t.Fatal(err)
		}
		commit := s.send(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_8"}}`)
		s.ping() // the commit is being retried (for 2 s, then spooled)
		start := time.Now()
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := os.Rename(ledger+".away", ledger); err != nil {
			t.Fatal(err)
		}
		got := s.rest()
		code := s.exit(30 * time.Second)
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("the stop took %s: the waiter (wait_secs 60) held it", took)
		}

		w, ok := got[waiter]
		var r serve.Refusal
		if !ok || !w.isErr || json.Unmarshal(w.raw, &r) != nil || r.Executed || r.Code == "" {
			t.Fatalf("the waiting prepare at the stop: %s (answered %v); want a refusal that says nothing ran\nstderr %s", w.raw, ok, s.stderr.String())
		}
		// The holder is alive: its claim is in flight. A wait cut short inside a ledger read
		// is a cancelled request (store_error saying so, as for a client's cancellation). A
		// wait that looked at the ledger while the file was away is refused as a ledger
		// failure (RELIABILITY.md: that process records nothing more while its path does not
		// name its file), which can come before the stop.
		away := r.Code == fence.CodeStore && strings.Contains(r.Message, "is not the file this process opened")
		if r.Code != fence.CodeInFlight && !away && (r.Code != fence.CodeStore || !strings.Contains(r.Next, "cancelled") || !strings.Contains(r.Next, "Do not run the effect")) {
			t.Fatalf("the waiting prepare at the stop: %+v; want intent_in_flight, store_error saying it was cancelled and not to run the effect, or store_error for the ledger away", r)
		}

		c, ok := got[commit]
		if !ok {
			t.Fatalf("the commit in flight at the stop got no answer\nstderr %s", s.stderr.String())
		}
		var cr serve.CommitResult
		if c.isErr {
			if json.Unmarshal(c.raw, &r) != nil || r.Code != fence.CodeStore || r.Spooled == "" || !r.Executed {
				t.Fatalf("the commit in flight at the stop: %s; want the cert, or store_error naming the spool file", c.raw)
			}
		} else if json.Unmarshal(c.raw, &cr) != nil || cr.Cert == nil {
			t.Fatalf("the commit in flight at the stop: %s", c.raw)
		}

		if code != 0 {
			t.Fatalf("serve stopped by SIGTERM exited %d, want 0\nstderr %s", code, s.stderr.String())
		}

		n := startServe(t, "--ledger", ledger)
		d := n.prepare(mine)
		if d.Status != serve.StatusAlreadyDone || d.Cert == nil || string(d.Cert.Result) != `{"charge":"ch_8"}` {
			t.Fatalf("a duplicate after the stop: %+v; want the committed result", d)
		}
	})

	t.Run("second signal", func(t *testing.T) {
		t.Parallel()
		// The commit is retried for 2 s (settleWait): a machine that stalls serve that long
		// between the commit and the second signal lets the stop finish the commit first (its
		// exit then stands, as it should). Such a try tests nothing and is made again.
		var ledger string
		for try := 1; ; try++ {
			ledger = filepath.Join(t.TempDir(), "ledger.db")
			s := startServe(t, "--ledger", ledger)
			p := s.prepare(mine)
			if p.Status != serve.StatusFresh {
				t.Fatalf("S's prepare: %+v", p)
			}
			if err := os.Rename(ledger, ledger+".away"); err != nil {
				t.Fatal(err)
			}
			commit := s.send(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_8"}}`)
			s.ping() // the commit is being retried (for 2 s, then spooled)
			for range 2 {
				if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			code := s.exit(30 * time.Second)
			if code == 128+int(syscall.SIGTERM) {
				break
			}
			if _, answered := s.rest()[commit]; answered && try < 3 {
				t.Logf("try %d: the commit was settled (spooled) before the second signal came; again", try)
				if err := os.Rename(ledger+".away", ledger); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Fatalf("serve after a second SIGTERM exited %d, want %d (at once, not after the commit)\nstderr %s", code, 128+int(syscall.SIGTERM), s.stderr.String())
		}
		if err := os.Rename(ledger+".away", ledger); err != nil {
			t.Fatal(err)
		}
		n := startServe(t, "--ledger", ledger)
		raw, isErr := n.call(serve.ToolPrepare, mine)
		var d serve.PrepareResult
		if !isErr && (json.Unmarshal(raw, &d) != nil || d.Status != serve.StatusAlreadyDone) {
			t.Fatalf("a duplicate after serve exited mid-commit: %s; it must never be told to run the effect again", raw)
		}
	})
}
