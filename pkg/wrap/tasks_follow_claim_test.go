package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// TestFollowerClaimIsTakenOverOnceItsWrapIsGone: a task-augmented duplicate in one wrap follows
// a first round in another wrap on the same ledger (flights not shared). The first round ends
// with a question, no outcome, so the intent is free and the follower's pass claims it, then
// releases it, running nothing. Between the two, its claim is what the ledger holds: were its
// wrap killed there (kill -9), that claim would be judged by the next attempt. It must say what
// it is, a claim that sent nothing: re-run safe, with no carrier, so that the next attempt
// takes it over once its holder is gone. Before 2026-12-07 it was an ordinary claim carried by
// the follower's server, and its holder gone, the intent was fenced unknown (an effect that
// may have happened) though nothing had run.
func TestFollowerClaimIsTakenOverOnceItsWrapIsGone(t *testing.T) {
	r := newRig(t)
	asks := sessionRig(t, r, r.openLedger(), wrap.NewShared(), `{"protocolVersion":"2026-07-28","capabilities":{"elicitation":{}},"clientInfo":{"name":"new-agent","version":"1"}}`)
	followLed := r.openLedger()
	older := sessionRigWait(t, r, followLed, wrap.NewShared(), `{"protocolVersion":"2025-11-25","capabilities":{"tasks":{},"elicitation":{}},"clientInfo":{"name":"old-agent","version":"1"}}`, 200*time.Millisecond)
	var mu sync.Mutex
	var held []fence.Record
	defer wrap.SetFollowerClaimed(func(intent string) {
		rec, err := followLed.Engine.Status(context.Background(), intent)
		if err != nil {
			t.Errorf("the follower's claim: %v", err)
		}
		mu.Lock()
		held = append(held, rec)
		mu.Unlock()
	})()
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"followclaim","until":%q,"mrtr_only":true}`, gate)
	asks.send(`{"jsonrpc":"2.0","id":"first","method":"tools/call","params":{"name":"confirm","arguments":` + args + `}}`)
	waitFor(t, "the first round to reach the server", func() bool { return strings.Contains(asks.log.String(), "confirm tag=followclaim asking") })
	older.send(`{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"confirm","arguments":` + args + `,"task":{"ttl":60000}}}`)
	var h struct {
		Task struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		} `json:"task"`
	}
	if m := older.answer(`"dup"`); json.Unmarshal(m["result"], &h) != nil || h.Task.Status != "working" {
		t.Fatalf("the task-augmented duplicate: %v, want a working task of wrap's own", m)
	}
	waitFor(t, "the follower to start", func() bool { return strings.Contains(older.log.String(), "follows the call in flight") })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := asks.answer(`"first"`); !strings.Contains(string(m["result"]), `"resultType":"input_required"`) {
		t.Fatalf("the first round: %v, want the server's input_required", m)
	}
	older.send(`{"jsonrpc":"2.0","id":"res","method":"tasks/result","params":{"taskId":"` + h.Task.TaskID + `"}}`)
	if m := older.answer(`"res"`); !strings.Contains(string(m["result"]), "NOT executed") {
		t.Fatalf("the following task's result: %v", m)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(held) != 1 {
		t.Fatalf("the follower claimed %d times, want once", len(held))
	}
	if rec := held[0]; rec.State != fence.StateInFlight || !rec.RerunSafe || rec.Owner != followLed.Engine.Config().Owner {
		t.Fatalf("the follower's claim as the ledger holds it: state %s, re-run safe %v, owner %q: its loss would leave the intent unknown though nothing ran", rec.State, rec.RerunSafe, rec.Owner)
	}
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d executions, want none", n)
	}
}
