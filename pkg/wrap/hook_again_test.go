package wrap_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// docs/wrap.md: the on_unknown hook "is told of each unknown outcome". An intent that became
// unknown, was cleared by the operator after checking, ran again and was lost again is a
// second unknown outcome the operator must check: the hook is told of it too. Before, the
// hook was told of an intent once per process, and the second loss reached nobody.
func TestOnUnknownHookToldAgainAfterAClear(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events.jsonl")
	hook := &wrap.Hook{Command: []string{"sh", "-c", `cat >> "$0"; echo >> "$0"`, events}}
	x, led := r.inproc(wrap.Options{OnUnknown: hook}, initNoElicit, nil)
	intent := unknownCall(t, x)
	if _, err := led.Engine.Clear(context.Background(), intent, "operator", "checked: nothing happened"); err != nil {
		t.Fatal(err)
	}
	if again := unknownCall(t, x); again != intent {
		t.Fatalf("the same call named intent %s, then %s", intent, again)
	}
	// A refusal of the still unknown intent is no new outcome: no third event.
	if res := x.call("die", `{"tag":"s3cret-tag"}`); !res.IsError {
		t.Fatalf("the retry must be refused: %+v", res)
	}
	x.close() // delivers what is queued
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatalf("the hook never ran: %v\n%s", err, x.log.String())
	}
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 2 {
		t.Fatalf("two unknown outcomes of intent %s; the hook was told of %d:\n%s\nlog:\n%s", intent, len(lines), b, x.log.String())
	}
}
