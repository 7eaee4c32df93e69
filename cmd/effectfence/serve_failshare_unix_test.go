//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// answerTo reads serve's answers until the one to the tools/call id (kept by an earlier read,
// or read now), keeping the others for later.
func (s *serveProc) answerTo(id int) servedAnswer {
	s.t.Helper()
	for {
		if a, ok := s.early[id]; ok {
			delete(s.early, id)
			return a
		}
		b, err := s.out.ReadBytes('\n')
		if err != nil {
			s.t.Fatalf("reading serve's answer to call %d: %v\nstderr %s", id, err, s.stderr.String())
		}
		s.keep(b)
	}
}

// waiting sends a fence_prepare of args that waits (wait_secs 30) and returns its id once it
// has found the intent in flight: serve has started it (ping), and it has had a second to
// look at the ledger (the claim it waits on is held meanwhile: nothing ends it but the test).
func (s *serveProc) waiting(args string) int {
	s.t.Helper()
	id := s.send(serve.ToolPrepare, strings.TrimSuffix(args, "}")+`,"wait_secs":30}`)
	s.ping()
	time.Sleep(time.Second)
	return id
}

// TestServeReleaseAsFailedIsSharedWithAWaiter holds SPEC §6 for serve's agents: a holder that
// ran the effect and saw it fail definitely says so with fence_release failed: true, and an
// agent whose fence_prepare waited on that attempt (wait_secs), through another serve process
// on the same ledger or through the same one, is refused waited_attempt_failed, with the
// holder's reason, not told to run the effect. The intent is free: a retry after it runs. A
// plain fence_release (failed left out, as before) still lets the waiter run: the effect did
// not happen. Before 2026-12-06 fence_release could only release, and the waiter of a failed
// attempt was answered fresh and ran the effect a second time.
//
// On PostgreSQL too, where the waiter in another process learns of the failure through the
// database, not through a file's events.
func TestServeReleaseAsFailedIsSharedWithAWaiter(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		releaseAsFailedIsShared(t, filepath.Join(t.TempDir(), "ledger.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		releaseAsFailedIsShared(t, pgLedger(t))
	})
}

func releaseAsFailedIsShared(t *testing.T, ledger string) {
	a := startServe(t, "--ledger", ledger)
	b := startServe(t, "--ledger", ledger)
	for _, tc := range []struct {
		name   string
		failed bool
		waiter *serveProc
	}{
		{"failed-waiter-in-another-process", true, b},
		{"failed-waiter-in-the-same-process", true, a},
		{"plain-release-waiter-in-another-process", false, b},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prep := fmt.Sprintf(`{"intent":"charge:%s","tool":"charge_card","args":{"amount":4900}}`, tc.name)
			p := a.prepare(prep)
			waited := tc.waiter.waiting(prep)
			const why = "the payment service answered: card declined"
			release := `{"ticket":` + ticketJSON(t, p.Ticket) + `,"reason":"` + why + `"` + map[bool]string{true: `,"failed":true`, false: ""}[tc.failed] + `}`
			var end serve.EndResult
			id := a.send(serve.ToolRelease, release)
			if got := a.answerTo(id); got.isErr || json.Unmarshal(got.raw, &end) != nil || end.State != fence.StateNone {
				t.Fatalf("fence_release %s: %s", release, got.raw)
			}
			got := tc.waiter.answerTo(waited)
			if !tc.failed {
				var d serve.PrepareResult
				if got.isErr || json.Unmarshal(got.raw, &d) != nil || d.Status != serve.StatusFresh || d.Ticket == nil {
					t.Fatalf("the waiter on an attempt released as not run: %s; want fresh (run it)", got.raw)
				}
				if _, isErr := tc.waiter.call(serve.ToolCommit, `{"ticket":`+ticketJSON(t, d.Ticket)+`,"result":{"charge":"ch_1"}}`); isErr {
					t.Fatal("the waiter's commit was refused")
				}
				return
			}
			var r serve.Refusal
			if !got.isErr || json.Unmarshal(got.raw, &r) != nil || r.Code != fence.CodeFailedWait || r.State != fence.StateNone || r.Executed || !strings.Contains(r.Message, why) {
				t.Fatalf("the waiter on an attempt released as failed: %s; want refused %s (not executed) with the holder's reason", got.raw, fence.CodeFailedWait)
			}
			// The intent is free: a retry after the failure runs.
			if d := tc.waiter.prepare(prep); d.Status != serve.StatusFresh {
				t.Fatalf("a retry after the shared failure: %+v; want fresh", d)
			}
		})
	}
}
