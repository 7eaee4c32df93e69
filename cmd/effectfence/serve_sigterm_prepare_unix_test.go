//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestServePrepareRacingSIGTERMLeavesNoClaimWithoutATicket: an agent's fence_prepare and the
// SIGTERM that stops serve arrive at about the same time, in either order, 0 to 1.1 ms apart.
// Whatever serve does with the prepare, a claim in the ledger must be one whose ticket the
// agent was given: a claim written but not answered would be an in-flight claim of a process
// about to exit, which the next attempt finds "unknown" (holder gone) and is refused until an
// operator clears it, though nothing ran. Seen here (2026-12-07): a prepare read before the
// signal is answered with its ticket; one sent after it is not read, and no claim is written.
func TestServePrepareRacingSIGTERMLeavesNoClaimWithoutATicket(t *testing.T) {
	t.Parallel()
	given, refused := 0, 0
	for i := 0; i < 24; i++ {
		ledger := filepath.Join(t.TempDir(), "l.db")
		s := startServe(t, "--ledger", ledger)
		s.prepare(`{"intent":"warm","tool":"x","args":{}}`) // serve has opened the ledger and answers
		intent := fmt.Sprintf("charge:sigterm-%d", i)
		line := fmt.Sprintf(`{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":%q,"tool":"charge_card","args":{"amount":4900}}}}`, intent)
		gap := time.Duration(i%12) * 100 * time.Microsecond
		send := func() {
			if _, err := s.in.Write([]byte(line + "\n")); err != nil && i < 12 {
				t.Fatalf("sending the prepare before the signal: %v", err)
			}
		}
		if i < 12 {
			send()
			time.Sleep(gap)
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
		} else {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			time.Sleep(gap)
			send()
		}
		time.Sleep(20 * time.Millisecond)
		_ = s.in.Close() // the agent hangs up: serve ends once what it took is done
		var answers []string
		for {
			b, err := s.out.ReadBytes('\n')
			if err != nil {
				break
			}
			answers = append(answers, string(b))
		}
		done := make(chan error, 1)
		go func() { done <- s.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: serve did not exit after SIGTERM and the end of its stdin\n%s", i, s.stderr.String())
		}
		ticket := false
		for _, a := range answers {
			if strings.Contains(a, `"id":99`) && strings.Contains(a, `"ticket"`) {
				ticket = true
			}
		}
		st, err := sqlite.Open(context.Background(), ledger, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		eng := fence.New(st, fence.Config{})
		rec, err := eng.Status(context.Background(), intent)
		_ = eng.Close()
		if err != nil && !errors.Is(err, fence.ErrNotFound) {
			t.Fatalf("round %d: status: %v", i, err)
		}
		switch {
		case ticket && rec.State != fence.StateInFlight:
			t.Errorf("round %d (prepare %s the signal by %v): a ticket was given but the ledger holds %q", i, map[bool]string{true: "before", false: "after"}[i < 12], gap, rec.State)
		case !ticket && rec.State != fence.StateNone && rec.State != "":
			t.Errorf("round %d (prepare %s the signal by %v): no ticket was given, but the ledger holds a claim (%s, owner %s): the next attempt is fenced though nothing ran\nanswers %q\n%s",
				i, map[bool]string{true: "before", false: "after"}[i < 12], gap, rec.State, rec.Owner, answers, s.stderr.String())
		case ticket:
			given++
		default:
			refused++
		}
	}
	t.Logf("tickets given %d, prepares not taken %d", given, refused)
}
