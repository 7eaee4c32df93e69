package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// Intent ids that differ from "pay:1" only by characters a terminal draws as nothing: a zero
// width space, a tag character (beyond U+FFFF), a Hangul filler (a letter, so Go's %q keeps
// it raw), a variation selector; and one that spells such a character as text.
var lookalikeIntents = map[string]string{
	"pay:1":                 "pay:1",
	"pay:\u200b1":           `pay:\u200b1`,
	"pay:1\U000e0031":       `pay:1\U000e0031`,
	"pay:\u31641":           `pay:\u31641`,
	"pay:1\ufe00":           `pay:1\ufe00`,
	"pay:\u2060\u00ad1":     `pay:\u2060\u00ad1`,
	"pay:1\u200d\U000e007f": `pay:1\u200d\U000e007f`,
	// The text of an escape, not the character: its backslash is shown doubled, or it would
	// read as the zero width space above (found in review, 2026-12-05).
	`pay:\u200b1`: `pay:\\u200b1`,
}

// TestLedgerLsTellsInvisibleLookalikesApart: an agent records intents that look like
// "pay:1"; ledger ls and ledger show print each one escaped, so no two rows look the same and
// the operator resolves the intent they mean. Before, the invisible characters were printed
// raw and every row read "pay:1".
func TestLedgerLsTellsInvisibleLookalikesApart(t *testing.T) {
	t.Parallel()
	plainBinary(t) // built before runBinary starts its two-minute clock: run alone, this test builds both
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	for intent := range lookalikeIntents {
		adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Abort(ctx, *adm.Ticket, "gateway timeout"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "ls", "--ledger", path)
	if r.code != exitOK {
		t.Fatalf("ledger ls = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if c, bad := drawsNothing(r.stdout); bad {
		t.Errorf("ledger ls prints %U raw:\n%s", c, r.stdout)
	}
	seen := map[string]bool{}
	for line := range strings.SplitSeq(r.stdout, "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "pay:") {
				if seen[f] {
					t.Errorf("ledger ls shows two rows as %q:\n%s", f, r.stdout)
				}
				seen[f] = true
			}
		}
	}
	for intent, shown := range lookalikeIntents {
		if !seen[shown] {
			t.Errorf("ledger ls does not show %+q as %s:\n%s", intent, shown, r.stdout)
		}
	}

	// show, and the refusal of an intent the ledger does not hold, quote the id escaped.
	r = runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "show", "pay:\u200b1", "--ledger", path)
	if _, bad := drawsNothing(r.stdout); bad || !strings.Contains(r.stdout, `$'pay:\u200b1'`) {
		t.Errorf("ledger show pay:\\u200b1 does not quote the id escaped:\n%s", r.stdout)
	}
	r = runBinary(t, nil, "", "ledger", "clear", "pay:\u31642", "--reason", "x", "--ledger", path)
	if _, bad := drawsNothing(r.stderr); bad || r.code != exitError || !strings.Contains(r.stderr, `pay:\u31642`) {
		t.Errorf("ledger clear of a lookalike it does not hold = %d, stderr %q", r.code, r.stderr)
	}

	// The suggested resolve command, pasted into bash, resolves the lookalike beyond U+FFFF
	// and no other: bash reads \U000e0031 inside $'…' as Escape wrote it.
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash:", err)
	}
	tagged := "pay:1\U000e0031"
	r = runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "show", tagged, "--ledger", path)
	var line string
	for l := range strings.SplitSeq(r.stdout, "\n") {
		if strings.Contains(l, "ledger resolve ") && strings.Contains(l, "--did-not-happen") {
			line = strings.TrimSpace(l)
		}
	}
	cmdline, ok := strings.CutPrefix(line, "effectfence ")
	if !ok || !strings.Contains(cmdline, `$'pay:1\U000e0031'`) {
		t.Fatalf("ledger show %+q suggests no `effectfence ledger resolve $'pay:1\\U000e0031' … --did-not-happen`:\n%s", tagged, r.stdout)
	}
	paste := exec.Command(bash, "-c", shellQuote(effectfence(t))+" "+cmdline)
	paste.Env = append(os.Environ(), "NO_COLOR=1", "LC_ALL=C.UTF-8")
	if out, err := paste.CombinedOutput(); err != nil {
		t.Fatalf("pasted into bash, %q: %v\n%s", line, err, out)
	}
	for intent := range lookalikeIntents {
		r := runBinary(t, nil, "", "ledger", "show", intent, "--json", "--ledger", path)
		var d ledger.Detail
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("ledger show --json %+q: %v\n%s%s", intent, err, r.stdout, r.stderr)
		}
		if d.Record.Intent != intent {
			t.Errorf("ledger show --json %+q names %+q", intent, d.Record.Intent)
		}
		want := fence.StateFailed
		if intent == tagged {
			want = fence.StateNone
		}
		if d.Record.State != want {
			t.Errorf("after pasting %q: %+q is %s, want %s", line, intent, d.Record.State, want)
		}
		if strings.ContainsAny(r.stdout, "\u200b\u3164\ufe00\u2060\u00ad\u200d\U000e0031\U000e007f") {
			t.Errorf("ledger show --json %+q holds an invisible character raw:\n%s", intent, r.stdout)
		}
	}
}

// drawsNothing reports a character of the lookalike ids that a terminal draws as nothing.
func drawsNothing(s string) (rune, bool) {
	for _, c := range s {
		switch c {
		case 0x200b, 0x200d, 0x2060, 0x00ad, 0x3164, 0xfe00, 0xe0031, 0xe007f:
			return c, true
		}
	}
	return 0, false
}
