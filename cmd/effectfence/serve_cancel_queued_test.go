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

// TestServeCancelledWhileQueuedHandsOutNoTicket runs the real binary with `--workers 1` on a
// SQLite ledger (docs/serve.md: a request "cancelled while it still waited for a free
// --workers slot" is answered with the cancellation when its slot comes, and the ledger is not
// asked). The wait lane's one slot is held by a fence_prepare waiting (wait_secs) on an intent
// in flight; behind it queue three more prepares with wait_secs, two of which the client
// cancels (one under an id that a JSON number cannot hold exactly). Then the holder commits:
// the waiter replays, and the queued prepares run in the order they came (a lane hands its
// slots out first come first; before, the waiter could lose its slot to a prepare queued
// after it, which then ran before its cancellation was read). The cancelled ones must be
// answered without a ticket and leave nothing in the ledger, not even a claim made and
// released; the one nobody cancelled is admitted as usual.
func TestServeCancelledWhileQueuedHandsOutNoTicket(t *testing.T) {
	t.Parallel()
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	s := startServe(t, "--workers", "1", "--ledger", ledger)
	held := s.prepare(`{"intent":"pay:held","tool":"t"}`)
	if held.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", held)
	}

	// Answers are read by one goroutine and handed over by id (the raw JSON of the id). serve
	// answers every tool call, a cancelled one too (with the cancellation), so the reader waits
	// for all five: the checks below then see the ledger after every queued call ran.
	answers := make(chan map[string]json.RawMessage, 1)
	required := []string{`"wait"`, `"q1"`, `9007199254740993`, `"kept"`, `"commit"`}
	go func() {
		got := map[string]json.RawMessage{}
		missing := func() bool {
			for _, id := range required {
				if got[id] == nil {
					return true
				}
			}
			return false
		}
		for missing() {
			line, err := s.out.ReadBytes('\n')
			if err != nil {
				break
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(line, &m) == nil && len(m.ID) > 0 {
				got[string(m.ID)] = line
			}
		}
		answers <- got
	}()
	send := func(line string) {
		t.Helper()
		if _, err := s.in.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	prepare := func(id, intent string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":%q,"tool":"t","wait_secs":30}}}`, id, intent)
	}
	send(prepare(`"wait"`, "pay:held")) // takes the wait lane's one slot until pay:held settles
	cancelled := map[string]string{`"q1"`: "pay:queued-1", `9007199254740993`: "pay:queued-2"}
	for id, intent := range cancelled {
		send(prepare(id, intent))
		send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `,"reason":"timeout"}}`)
	}
	send(prepare(`"kept"`, "pay:queued-kept"))
	// serve routes its input in order, marking a queued call as it reads its cancellation, so
	// every mark is made before the commit (the settle lane's) frees the slot.
	send(`{"jsonrpc":"2.0","id":"commit","method":"tools/call","params":{"name":"fence_commit","arguments":{"ticket":` + ticketJSON(t, held.Ticket) + `,"result":{"ok":true}}}}`)

	var got map[string]json.RawMessage
	select {
	case got = <-answers:
	case <-time.After(90 * time.Second):
		t.Fatalf("serve did not answer in 90 s; stderr:\n%s", s.stderr.String())
	}
	for _, id := range required {
		if got[id] == nil {
			t.Fatalf("no answer to %s (answers %d); stderr:\n%s", id, len(got), s.stderr.String())
		}
	}
	if a := string(got[`"wait"`]); !strings.Contains(a, `"already_done"`) {
		t.Errorf("the waiter on pay:held was answered %s; want already_done once the holder committed", a)
	}
	if a := string(got[`"kept"`]); !strings.Contains(a, `"fresh"`) || !strings.Contains(a, `"ticket"`) {
		t.Errorf("the queued prepare nobody cancelled was answered %s; want fresh, with its ticket", a)
	}
	for id := range cancelled {
		if a := string(got[id]); strings.Contains(a, `"fresh"`) || strings.Contains(a, `"ticket"`) || !strings.Contains(a, `"isError":true`) || !strings.Contains(a, "cancel") {
			t.Errorf("the prepare %s, cancelled while queued, was answered %s; want the cancellation, without a ticket", id, a)
		}
	}

	// The ledger holds nothing for the cancelled prepares, as serve reads it and as another
	// process does: no claim, not even one made and released (ledger show finds no intent).
	for _, intent := range cancelled {
		raw, isErr := s.call(serve.ToolStatus, fmt.Sprintf(`{"intent":%q}`, intent))
		var st struct {
			Intent struct {
				State fence.State `json:"state"`
			} `json:"intent"`
		}
		if isErr || json.Unmarshal(raw, &st) != nil || st.Intent.State != fence.StateNone {
			t.Errorf("%s after its prepare was cancelled while queued: %s; want state none", intent, raw)
		}
		if r := runBinary(t, nil, "", "ledger", "show", "--ledger", ledger, intent); r.code != 1 {
			t.Errorf("ledger show %s: exit %d; want 1, no such intent (a prepare cancelled while queued asks nothing of the ledger)\n%s%s", intent, r.code, r.stdout, r.stderr)
		}
	}
	r := runBinary(t, nil, "", "ledger", "ls", "--ledger", ledger, "--json")
	if r.code != 0 {
		t.Fatalf("ledger ls: %d %s", r.code, r.stderr)
	}
	for _, intent := range cancelled {
		if strings.Contains(r.stdout, `"`+intent+`"`) {
			t.Errorf("ledger ls lists %s, whose prepare was cancelled while queued: %s", intent, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, `"intent": "pay:queued-kept"`) || !strings.Contains(r.stdout, `"state": "in_flight"`) {
		t.Errorf("ledger ls does not list the kept prepare in flight: %s", r.stdout)
	}
}
