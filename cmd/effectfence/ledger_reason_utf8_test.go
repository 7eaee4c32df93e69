package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/ledger"
)

// TestLedgerOperatorTextMustBeUTF8: clear and resolve refuse a --reason, --ref or --result
// that is not UTF-8 as usage (exit 2) and change nothing; before, the command said it
// recorded the reason while the audit trail kept U+FFFD for each invalid byte. Text that is
// UTF-8, escapes included, is recorded exactly (docs/ledger.md).
func TestLedgerOperatorTextMustBeUTF8(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedCLI(t, path) // refund:9 failed, fenced
	env := []string{"NO_COLOR=1"}
	show := func() ledger.Detail {
		t.Helper()
		r := runBinary(t, env, "", "ledger", "show", "refund:9", "--json", "--ledger", path)
		var d ledger.Detail
		if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &d) != nil {
			t.Fatalf("show: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		return d
	}
	before := show()
	for _, args := range [][]string{
		{"clear", "refund:9", "--reason", "no charge\xff in the PSP"},
		{"resolve", "refund:9", "--did-not-happen", "--reason", "\xc3"},
		{"resolve", "refund:9", "--happened", "--ref", "ch_\xfe", "--reason", "found it"},
		{"resolve", "refund:9", "--happened", "--result", `{"text":"` + "\xff" + `"}`, "--reason", "found it"},
	} {
		r := runBinary(t, env, "", append(append([]string{"ledger"}, args...), "--ledger", path)...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "not valid UTF-8") {
			t.Errorf("ledger %q: exit %d\nstdout %q\nstderr %s", args, r.code, r.stdout, r.stderr)
		}
	}
	if after := show(); after.Record.State != before.Record.State || len(after.Events) != len(before.Events) {
		t.Fatalf("a refused command changed the intent: %s, %d events (before %s, %d)", after.Record.State, len(after.Events), before.Record.State, len(before.Events))
	}
	reason := "checked \x1b[2J\u202e the PSP: none" // (argv holds no NUL)
	if r := runBinary(t, env, "", "ledger", "clear", "refund:9", "--reason", reason, "--ledger", path); r.code != exitOK {
		t.Fatalf("clear: %d %s", r.code, r.stderr)
	}
	d := show()
	if last := d.Events[len(d.Events)-1]; last.Kind != "clear" || last.Reason != reason {
		t.Fatalf("the clear recorded %s %q, want clear %q", last.Kind, last.Reason, reason)
	}
}
