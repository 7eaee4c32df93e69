package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/mdspan"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServeClearCommandOfAHostileIntentClearsThatIntent: docs/serve.md says a prior_failure
// names the operator's clear command with --ledger and serve's ledger, and docs/ledger.md that
// `ledger clear` records who (user@host) and why. The intent is the agent's text and the
// ledger's path the operator's: the command serve hands out, pasted into a real shell with
// the operator's own environment (no EFFECTFENCE_LEDGER, another state directory), must clear
// that very intent in that very ledger and record the operator and the reason given, and the
// next attempt must then run. The intents: one that begins with '-' (read as a flag, the
// command failed as usage), one with a quote, a newline, '$' and a backquote, and one that
// a shell would split; the ledger's path holds a space, a quote and a '$'.
func TestServeClearCommandOfAHostileIntentClearsThatIntent(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := filepath.Join(t.TempDir(), "it's $HOME")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "serve ledger.db")
	a := startServe(t, "--ledger", path)
	for i, intent := range []string{"-charge:o-1", "--force", "pay:it's\n$(id) `id`", "a b;c|d&e", "é\u202e:1"} {
		prep, _ := json.Marshal(map[string]any{"intent": intent, "tool": "charge", "args": map[string]any{"n": i}})
		p := a.prepare(string(prep))
		if p.Status != serve.StatusFresh {
			t.Fatalf("%q: first prepare %+v", intent, p)
		}
		raw, isErr := a.call(serve.ToolAbort, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"reason":"timed out"}`)
		var end serve.EndResult
		if isErr || json.Unmarshal(raw, &end) != nil {
			t.Fatalf("%q: abort refused: %s", intent, raw)
		}
		r := a.refused(serve.ToolPrepare, string(prep))
		if r.Code != fence.CodePriorFailure {
			t.Fatalf("%q: after the abort %+v", intent, r)
		}
		// The command is the Markdown code span after "run ", read as a client renders it
		// (CommonMark; line endings aside, which a renderer shows as spaces). Before
		// 2026-12-07 it was in single backquotes, which the intent's own backquote closed
		// early: this test read up to the last backquote instead, as no renderer does.
		pasted := func(next string) string {
			command, ok := mdspan.After(next, "run ")
			if !ok || !strings.HasPrefix(command, "effectfence ledger clear ") || !strings.Contains(command, "--reason ...") {
				t.Fatalf("%q: next names no clear command in a code span: %s", intent, next)
			}
			return command
		}
		command := pasted(r.Next)
		// The abort's answer names the same command (before 2026-12-07: none, "and clear it").
		if c := pasted(end.Next); c != command {
			t.Fatalf("%q: the abort's answer names %s; the refusal after it %s", intent, c, command)
		}
		const why = "no charge in the PSP's dashboard"
		command = strings.Replace(command, "--reason ...", "--reason \"$WHY\"", 1)
		sh := exec.Command("sh", "-c", command)
		sh.Env = []string{
			"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
			"HOME=" + t.TempDir(), "XDG_STATE_HOME=" + t.TempDir(), "WHY=" + why, "NO_COLOR=1",
			"GORACE=atexit_sleep_ms=0",
		}
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: the clear command serve named (%s): %v\n%s", intent, command, err, out)
		}
		show := exec.Command(bin, "ledger", "show", "--json", "--ledger", path, "--", intent)
		show.Env = append(os.Environ(), "NO_COLOR=1", "GORACE=atexit_sleep_ms=0")
		raw, err = show.Output()
		var d struct{ Events []fence.Event }
		if err != nil || json.Unmarshal(raw, &d) != nil || len(d.Events) == 0 {
			t.Fatalf("%q: ledger show: %v\n%s", intent, err, raw)
		}
		last := d.Events[len(d.Events)-1]
		if last.Kind != fence.EventClear || last.Intent != intent || last.Reason != why || last.Who != ledger.Operator() || last.State != fence.StateFailed {
			t.Fatalf("%q: the last event after the clear: %+v; want a clear of the failed intent by %s because %q", intent, last, ledger.Operator(), why)
		}
		if p := a.prepare(string(prep)); p.Status != serve.StatusFresh {
			t.Fatalf("%q: after the clear %+v; want the next attempt to run", intent, p)
		}
	}
}
