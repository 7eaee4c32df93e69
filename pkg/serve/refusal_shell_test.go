package serve_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/mdspan"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestPriorFailureCommandNamesItsIntentToTheShell: the refusal of a fenced intent tells the
// agent to have an operator run `effectfence ledger clear INTENT --reason ...`, and the intent
// is the agent's own text. Pasted into a real shell, the command must name that intent, not
// one the shell made of it: "charge:$25 order 7" read unquoted clears "charge:5" (a different
// intent, whose next attempt then runs again), and a ';' ends the command.
func TestPriorFailureCommandNamesItsIntentToTheShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	for _, intent := range []string{"scale:web", "charge:$25 order 7", "it's:1", "x;true", "pay:`id`", "a\\b"} {
		req := fence.Request{Intent: intent, Tool: "t", Args: []byte(`{"n":1}`)}
		adm, err := eng.Prepare(ctx, req)
		if err != nil || adm.Ticket == nil {
			t.Fatalf("prepare %q: %+v %v", intent, adm, err)
		}
		if err := eng.Abort(ctx, *adm.Ticket, "timeout"); err != nil {
			t.Fatal(err)
		}
		_, err = eng.Prepare(ctx, req)
		r := serve.RefusalOf(intent, err)
		// The command is the Markdown code span after "run ", as a client renders it (before
		// 2026-12-07 it was in single backquotes, which an intent's own backquote closed, and
		// this test read up to the last backquote, as no renderer does). The message says
		// the same.
		cmd, ok := mdspan.After(r.Next, "run ")
		if inMessage, _ := mdspan.After(r.Message, "run "); r.Code != fence.CodePriorFailure || !ok || !strings.HasPrefix(cmd, "effectfence ledger clear ") || inMessage != cmd {
			t.Fatalf("%q: refusal %+v; want a ledger clear command in a code span, the same in its message", intent, r)
		}
		// The operator's shell runs the command; this one prints the intent it was given.
		out, err := exec.Command(sh, "-c", `effectfence() { printf '%s' "$3"; }; `+cmd).Output()
		if err != nil || string(out) != intent {
			t.Errorf("%q: the shell ran %s on intent %q (%v); want the intent itself", intent, cmd, out, err)
		}
	}
}
