package wrap_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A fenced call's message names the operator's commands for the attempt that went unknown.
// Pasted after another operator cleared the intent and a new attempt ran and went unknown in
// turn, the clear must not free that new attempt, whose effect nobody has checked: it is
// refused, nothing changed, and the next call stays fenced. Before, it cleared the new attempt
// and the call ran a third time. Real wrap, real MCP server dying mid-call, the command pasted
// into a shell.
func TestPastedClearOfAnEarlierAttemptIsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	first := call(t, w.Session, "die", `{"ms":50}`)
	if !first.IsError || !strings.Contains(first.text(), "effectfence ledger clear ") || r.effectCount() != 1 {
		t.Fatalf("the first attempt must end unknown with the operator's commands: %s", first.text())
	}
	// Another operator clears it (their own paste of the same message, say), and the call runs
	// again and ends unknown again.
	r.runClearCommand(first.text())
	second := call(t, w.Session, "die", `{"ms":50}`)
	if !second.IsError || r.effectCount() != 2 {
		t.Fatalf("after the clear the call must run once more: %s, %d effects", second.text(), r.effectCount())
	}
	msg := first.text()
	line := strings.TrimSpace(msg[strings.Index(msg, "effectfence ledger clear "):])
	cmd := exec.Command("sh", "-c", efBin+strings.TrimPrefix(line, "effectfence"))
	cmd.Env = append(os.Environ(), r.env()...)
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "cleared ") || !strings.Contains(string(out), "claimed again") {
		t.Fatalf("the first attempt's clear, pasted after the second attempt went unknown: %v\n%s\nwant it refused", err, out)
	}
	if x := call(t, w.Session, "die", `{"ms":50}`); !x.IsError || !strings.Contains(x.text(), "NOT executed again") || r.effectCount() != 2 {
		t.Fatalf("the second attempt must stay fenced: %s, %d effects", x.text(), r.effectCount())
	}
}
