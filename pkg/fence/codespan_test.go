package fence_test

import (
	"testing"

	"github.com/effectfence/effectfence/internal/mdspan"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestRefusalCommandSpansHoldHostileIntents: a prior_failure names the clear command in a
// Markdown code span, and the intent in it is the agent's text. Read as a client renders it,
// the span must be the whole command: before 2026-12-07 it was in single backquotes, which an
// intent's own backquote closed ("pay`x" showed `effectfence ledger clear 'pay` and the rest as
// prose).
func TestRefusalCommandSpansHoldHostileIntents(t *testing.T) {
	for _, intent := range []string{"pay:1", "pay`x", "a``b```c", "`lead", "trail`", " spaced ", "``", "-`x`"} {
		e := fence.PriorFailureError{Intent: intent, State: fence.StateFailed, Reason: "timeout", Token: 3}
		want := fence.ClearCommandWith(intent, fence.ClaimFlag(3))
		got, ok := mdspan.After(e.Error(), "run ")
		if !ok || got != want {
			t.Errorf("%q: the span after \"run \" reads %q (%v); want %q\n%s", intent, got, ok, want, e.Error())
		}
		for _, s := range []string{intent, want, " " + intent} {
			if got, ok := mdspan.At(fence.CodeSpan(s)); !ok || got != s {
				t.Errorf("CodeSpan(%q) = %s reads %q (%v)", s, fence.CodeSpan(s), got, ok)
			}
		}
	}
	if s := fence.CodeSpan("plain"); s != "`plain`" {
		t.Errorf("CodeSpan of a plain command: %s; want it in single backquotes, as before", s)
	}
}
