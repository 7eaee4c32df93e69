package wrap_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// A call fenced as unknown on a ledger in wrap's memory is not told to run `effectfence
// ledger clear --ledger memory`: that command opens a new, empty ledger of its own (and is
// refused), so no command can settle the intent. The answer and wrap's log say so instead.
func TestUnknownOnAMemoryLedgerNamesNoLedgerCommand(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.ledger = "memory"
	w := r.wrap()
	for i, x := range []result{call(t, w.Session, "die", `{"ms":50}`), call(t, w.Session, "die", `{"ms":50}`)} {
		text := x.text()
		if !x.IsError || string(x.Meta["effectfence/code"]) != `"prior_failure"` {
			t.Fatalf("call %d: want a prior_failure refusal, got %+v", i, text)
		}
		if strings.Contains(text, "effectfence ledger clear") || strings.Contains(text, "effectfence ledger resolve") || strings.Contains(text, "operator must then run") {
			t.Fatalf("call %d names a ledger command that cannot reach a memory ledger: %s", i, text)
		}
		if !strings.Contains(text, "in its memory") || !strings.Contains(text, "until this wrap restarts") {
			t.Fatalf("call %d does not say what settles the intent: %s", i, text)
		}
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("die ran %d times, want 1", n)
	}
	if log := w.log.String(); strings.Contains(log, "effectfence ledger clear") || !strings.Contains(log, "until this wrap restarts") {
		t.Fatalf("wrap's log must say the memory ledger cannot be cleared by a command:\n%s", log)
	}
}

// The unknown hook of a wrap on a memory ledger carries no resolve_command (docs/ledger.md):
// no command it could name reaches that ledger.
func TestUnknownHookOnAMemoryLedgerHasNoResolveCommand(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.ledger = "memory"
	events := filepath.Join(r.dir, "events.jsonl")
	hook := &wrap.Hook{Command: []string{"sh", "-c", `cat >> "$0"; echo >> "$0"`, events}}
	x, _ := r.inproc(wrap.Options{OnUnknown: hook, InMemory: true}, initNoElicit, nil)
	intent := unknownCall(t, x)
	x.close() // delivers what is queued
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatalf("the hook never ran: %v\n%s", err, x.log.String())
	}
	var ev wrap.HookEvent
	if err := json.Unmarshal(bytes.TrimSpace(b), &ev); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if ev.Event != "unknown" || ev.Intent != intent || ev.ResolveCommand != "" {
		t.Fatalf("event: %s", b)
	}
}
