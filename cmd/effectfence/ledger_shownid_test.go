package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestIntentCopiedFromLsIsNamedInItsQuotedForm: `ledger ls` shows an intent's control and
// invisible characters escaped and its backslashes doubled, so an operator who copies such an
// intent from it and gives it to show or clear names no intent. The refusal said only "holds no
// intent … (see `effectfence ledger ls`)", which is where the copy came from: the intent could
// not be shown or cleared by what ls showed. It now names the intent in the $'…' form that
// pastes into bash or zsh, and that form reaches it.
func TestIntentCopiedFromLsIsNamedInItsQuotedForm(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	intent := "pay:\x1b[31m7\u200b\\n'"
	if _, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Args: []byte(`{}`), Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "", "ledger", "ls", "--ledger", path)
	i := strings.Index(out, "pay:")
	if code != exitOK || i < 0 {
		t.Fatalf("ls: exit %d\n%s%s", code, out, errOut)
	}
	shown := strings.Fields(out[i:])[0]
	quoted := shellQuote(intent)
	for _, sub := range [][]string{{"show"}, {"clear", "--force", "--reason", "checked"}} {
		code, out, errOut := runCLI(t, "", append(append([]string{"ledger"}, sub...), "--ledger", path, shown)...)
		if code != exitError || out != "" || !strings.Contains(errOut, quoted) {
			t.Errorf("%s %s (as ls shows it): exit %d, stdout %q; want exit 1 and the intent named as %s\n%s", sub[0], shown, code, out, quoted, errOut)
		}
	}
	// What the hint says reaches the intent.
	if code, out, errOut := runCLI(t, "", "ledger", "show", "--ledger", path, intent); code != exitOK || !strings.Contains(out, "in_flight") {
		t.Errorf("show of the intent itself: exit %d\n%s%s", code, out, errOut)
	}
}
